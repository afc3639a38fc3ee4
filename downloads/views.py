"""The download pages: the list with its submit form, one row's live partial, the actions,
the player page and the file itself.

A row polls its own partial (`row`) every second while the download is live;
the partial for a finished download comes back without the polling trigger,
so htmx stops asking, and with a "storage-changed" event that makes the
storage line ask for its own partial again. Every view looks downloads up
through the owner, so another user's id is a 404.
"""

import uuid

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from downloads import selectors, services, serving, shots, storage
from downloads.forms import DownloadForm, EditForm
from downloads.models import DownloadStatus
from insights.views import DATA_CHANGED as INSIGHT_DATA_CHANGED
from jobs.exceptions import IllegalTransition, TransportUnavailable

LIST_LIMIT = 200


def _mine(request, download_id):
    try:
        key = uuid.UUID(str(download_id))
    except ValueError:
        raise Http404 from None
    found = selectors.download_of(request.user, key)
    if found is None:
        raise Http404
    return found


@require_http_methods(["GET", "POST"])
def download_list(request):
    form = DownloadForm(request.POST or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            services.download_submit(owner=request.user, url=form.cleaned_data["url"],
                                     fmt=form.cleaned_data["format"],
                                     name=form.cleaned_data["name"])
        except ValidationError as exc:
            form.add_error("url", exc)
            status = 400
        except services.QueueFull as exc:
            form.add_error(None, str(exc))
            status = 429
        else:
            return redirect("downloads:list")
    elif request.method == "POST":
        status = 400
    served = selectors.served_kinds()
    states = [selectors.download_state(d, served_kinds=served)
              for d in selectors.downloads_of(request.user)[:LIST_LIMIT]]
    return render(request, "downloads/list.html", {
        "form": form, "states": states, **_storage_context(request),
    }, status=status)


def _storage_context(request):
    return {"quota": selectors.quota_for(request.user),
            "used_bytes": selectors.storage_used_bytes(request.user)}


@require_GET
def download_storage(request):
    return render(request, "downloads/_storage.html", _storage_context(request))


STORAGE_CHANGED = "storage-changed"  # the event the storage line listens for


def _row(request, state, notice=""):
    response = render(request, "downloads/_row.html", {"state": state, "notice": notice})
    if not state.is_live:
        response.headers["HX-Trigger"] = STORAGE_CHANGED  # it may hold a file now, or none
    return response


@require_GET
def download_row(request, download_id):
    return _row(request, selectors.download_state(_mine(request, download_id)))


ACTIONS = {
    "pause": services.download_pause,
    "resume": services.download_resume,
    "cancel": services.download_cancel,
    "retry": services.download_retry,
}


@require_POST
def download_action(request, download_id, name):
    download = _mine(request, download_id)
    notice = ""
    try:
        ACTIONS[name](download, actor=request.user)
    except IllegalTransition as exc:
        notice = str(exc)
    except services.QueueFull as exc:
        notice = str(exc)
    if not request.htmx:
        if notice:
            messages.error(request, notice)
        return redirect("downloads:list")
    return _row(request, selectors.download_state(_mine(request, download_id)), notice)


@require_POST
def download_delete(request, download_id):
    services.download_delete(_mine(request, download_id), actor=request.user)
    if request.htmx:
        # The row swaps itself out, and the storage line asks again.
        return HttpResponse("", headers={"HX-Trigger": STORAGE_CHANGED})
    messages.success(request, _("The download was deleted."))
    return redirect("downloads:list")


def _detail(request, download, edit_form, status=200):
    return render(request, "downloads/detail.html", {
        "state": selectors.download_state(download), "download": download,
        "asset": download.asset, "edit_form": edit_form,
        **shots.page_context(download, selected_index=request.GET.get("shot")),
    }, status=status)


@require_GET
def download_detail(request, download_id):
    return _detail(request, _mine(request, download_id), EditForm())


@require_POST
def download_edit(request, download_id):
    download = _mine(request, download_id)
    form = EditForm(request.POST)
    if form.is_valid():
        try:
            services.edit_submit(owner=request.user, source=download, edit=form.edit())
        except ValidationError as exc:
            form.add_error(None, exc)
        except (IllegalTransition, services.QueueFull) as exc:
            messages.error(request, str(exc))
            return redirect("downloads:detail", download_id=download.pk)
        else:
            messages.success(request, _("The edit is queued."))
            return redirect("downloads:list")
    # A bad edit is the request's fault: 400, with the form and its errors shown again.
    return _detail(request, download, form, status=400)


def file_response(request, download):
    """The download's file (whole or the range asked for; `?download=1` saves it as an
    attachment), or None when it has none. The page and the JSON API both serve it here."""
    if not selectors.has_file(download):
        return None
    asset = download.asset
    path = storage.absolute(asset.file)
    name = (download.name or asset.title or "media").replace("/", "_")[:150] + path.suffix
    try:
        response = serving.file_response(request, path, filename=name,
                                         attachment=request.GET.get("download") == "1")
    except Http404:
        return None  # housekeeping removed it after the check
    services.asset_touch_if_stale(asset.pk)
    return response


@require_http_methods(["GET", "HEAD"])
def download_file(request, download_id):
    """The file, to its owner only, with range support for seeking."""
    response = file_response(request, _mine(request, download_id))
    if response is None:
        raise Http404
    return response


# --- Shots (the CV results of a video) --------------------------------------------

def _shots_partial(request, download, state, notice=""):
    return render(request, "downloads/_shots.html", {
        "download": download, "shots": state, "notice": notice})


@require_GET
def download_shots(request, download_id):
    download = _mine(request, download_id)
    if download.current_status != DownloadStatus.SUCCESSFUL:
        raise Http404
    state = shots.shots_state(download)
    response = _shots_partial(request, download, state)
    if not state["live"]:
        # The page polls this partial only while CV jobs run, so a final answer means new shots
        # or measurements just arrived: the summary and notes open beside them ask again.
        response.headers["HX-Trigger"] = INSIGHT_DATA_CHANGED
    return response


@require_POST
def download_shots_action(request, download_id, name):
    download = _mine(request, download_id)
    if download.current_status != DownloadStatus.SUCCESSFUL:
        raise Http404
    notice = ""
    try:
        if name == "segment":
            shots.asset_segment(download.asset, owner=request.user)
        else:
            shots.shots_analyze_all(download.asset, owner=request.user)
    except (IllegalTransition, TransportUnavailable, shots.CVQueueFull) as exc:
        # A dead CV queue or a full one is said in the panel like any refusal: htmx 2
        # swaps no 4xx or 5xx answer, so a 503 or 429 here would leave the user with nothing.
        notice = str(exc)
    if not request.htmx:
        if notice:
            messages.error(request, notice)
        return redirect("downloads:detail", download_id=download.pk)
    return _shots_partial(request, download, shots.shots_state(download), notice)


@require_http_methods(["GET", "HEAD"])
def shot_image(request, download_id, index, image):
    """A shot's thumbnail or keyframe strip, to those who hold its video."""
    download = _mine(request, download_id)
    if download.current_status != DownloadStatus.SUCCESSFUL:
        raise Http404
    shot = download.asset.shots.filter(index=index).first()
    if shot is None:
        raise Http404
    relative = shot.thumbnail if image == "thumbnail" else (shot.analysis or {}).get("keyframe_strip")
    if not relative or not storage.exists(relative):
        raise Http404
    return serving.file_response(request, storage.absolute(relative))
