"""The JSON API for downloads (session or bearer token; CSRF applies to sessions).

    GET    /api/downloads/                      yours, newest first
    POST   /api/downloads/                      {"url": ..., "format": "best"|"audio"|"720p", "name"?}
    GET    /api/downloads/<id>/                 one, with progress, where it stands, its asset's
                                                id, and where its shots and summary are
    DELETE /api/downloads/<id>/
    POST   /api/downloads/<id>/{pause,resume,cancel,retry}   (retry on an evicted one: download again)
    POST   /api/downloads/<id>/segment/         (re-)split the video into shots → 202
    GET    /api/downloads/<id>/shots/           the segment job's state and the shots
    GET    /api/downloads/<id>/file/            the finished download's file (HEAD, one Range)
    POST   /api/shots/<id>/analyze/             measure one shot → 202

A download's "status" is the engine's state in lower case, or "evicted": it
had finished, and storage housekeeping deleted the file to make room. A
document links what belongs to it (the asset's shots, the video summary and
how to ask for it, each shot's notes) by absolute URL, so a script needs no
internal numbers of its own. docs/api.md describes every field.

Errors are JSON {"error": sentence, "error_code": code}: 400 bad input, 401
anonymous (the login middleware), 404 not yours or no such id, 405, 409 an
action the download's state does not allow (or its file asked for before it
has one), 416 a range outside the file, 429 over the queued cap. GETs only
read.
"""

import uuid

from django.core.exceptions import ValidationError
from django.http import HttpResponse, JsonResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from core import jsonapi
from core.jsonapi import error
from downloads import selectors, services, shots, views
from downloads.forms import DownloadForm
from downloads.models import DownloadStatus
from insights import selectors as insight_selectors
from insights.models import InsightKind
from jobs.exceptions import IllegalTransition, TransportUnavailable

LIST_LIMIT = 200


def _iso(value):
    return value.isoformat() if value else None


def _absolute(request, path):
    return request.build_absolute_uri(path) if path else None


def insight_link(request, kind, subject, insight):
    """Where the user's insight of `kind` about `subject` is read (null until it was asked for),
    and the request that asks for it (idempotent: asking again returns the same insight)."""
    return {
        "kind": kind,
        "subject": str(subject),
        "url": request.build_absolute_uri(reverse("insights:api_insight", args=[insight.pk]))
        if insight is not None else None,
        "status": insight.current_status if insight is not None else None,
        "request": {
            "method": "POST",
            "url": request.build_absolute_uri(reverse("insights:api_list")),
            "body": {"kind": kind, "subject": str(subject), "priority": "interactive"},
        },
    }


def summaries_of(user, downloads):
    """{asset id: the user's summary insight of it} for a list of downloads, in one query."""
    found = insight_selectors.insights_by_subject(user, InsightKind.VIDEO_SUMMARY,
                                                  {d.asset_id for d in downloads})
    return {int(subject): insight for subject, insight in found.items()}


def download_json(state, request, summaries=None):
    download, asset = state.download, state.download.asset
    if summaries is None:
        summaries = summaries_of(request.user, [download])
    shots_url = None
    if state.status == "successful" and asset.is_video:
        shots_url = request.build_absolute_uri(reverse("downloads:api_shots", args=[download.pk]))
    file_url = None
    if state.file_url:  # the page's link, set only while there is a file; a token fetches it here
        file_url = request.build_absolute_uri(reverse("downloads:api_file", args=[download.pk]))
    return {
        "id": str(download.pk),
        "name": download.name or asset.title,
        "url": asset.url,
        "format": asset.format,
        "edit": asset.edit or None,
        "status": state.status,
        "progress": state.fraction,
        "phase": state.phase or None,
        "bytes_done": state.bytes_done,
        "bytes_total": state.bytes_total,
        "speed_bytes_s": state.speed_bytes_s,
        "eta_s": state.eta_s,
        "queue_position": state.queue_position,
        "waiting_code": state.waiting_code or None,
        "waiting_reason": str(state.waiting_reason) or None,
        "error": state.error or None,
        "error_code": state.error_code or None,
        "actions": list(state.actions),
        "created_at": _iso(download.created_at),
        "finished_at": _iso(download.finished_at) if not state.is_live else None,
        "page_url": request.build_absolute_uri(reverse("downloads:detail", args=[download.pk])),
        "asset": {
            "id": asset.pk,
            "title": asset.title,
            "duration_s": asset.duration_s,
            "size_bytes": asset.size_bytes,
            "file_url": file_url,
            "shots_url": shots_url,
        },
        "summary": insight_link(request, InsightKind.VIDEO_SUMMARY, asset.pk,
                                summaries.get(asset.pk)),
    }


def _mine(request, download_id):
    try:
        key = uuid.UUID(str(download_id))
    except ValueError:
        return None
    return selectors.download_of(request.user, key)


def not_found():
    return error(404, "not_found", _("No such download."))


def downloads(request):
    if request.method == "GET":
        served = selectors.served_kinds()
        rows = list(selectors.downloads_of(request.user)[:LIST_LIMIT])
        summaries = summaries_of(request.user, rows)
        return JsonResponse({"downloads": [
            download_json(selectors.download_state(d, served_kinds=served), request, summaries)
            for d in rows]})
    if request.method != "POST":
        return error(405, "method_not_allowed", _("Use GET or POST."))
    try:
        data = jsonapi.json_object(request)
        form = DownloadForm({"url": jsonapi.text(data, "url"),
                             "format": jsonapi.text(data, "format", default="best"),
                             "name": jsonapi.text(data, "name")})
    except jsonapi.BadRequest as exc:
        return exc.response()
    if not form.is_valid():
        return error(400, "invalid", _("Check the fields."), errors={
            field: [str(m) for m in messages] for field, messages in form.errors.items()})
    try:
        download = services.download_submit(
            owner=request.user, url=form.cleaned_data["url"], fmt=form.cleaned_data["format"],
            name=form.cleaned_data["name"])
    except ValidationError as exc:
        return error(400, "invalid", exc.messages[0], errors={"url": exc.messages})
    except services.TooFast as exc:
        return error(429, "rate_limited", str(exc))
    except services.QueueFull as exc:
        return error(429, "queue_full", str(exc))
    download = selectors.download_of(request.user, download.pk)
    response = JsonResponse(download_json(selectors.download_state(download), request), status=201)
    response["Location"] = request.build_absolute_uri(reverse("downloads:api_download",
                                                              args=[download.pk]))
    return response


def download(request, download_id):
    found = _mine(request, download_id)
    if found is None:
        return not_found()
    if request.method == "GET":
        return JsonResponse(download_json(selectors.download_state(found), request))
    if request.method == "DELETE":
        services.download_delete(found, actor=request.user)
        return HttpResponse(status=204)
    return error(405, "method_not_allowed", _("Use GET or DELETE."))


ACTIONS = {
    "pause": services.download_pause,
    "resume": services.download_resume,
    "cancel": services.download_cancel,
    "retry": services.download_retry,
}


def action(request, download_id, name):
    found = _mine(request, download_id)
    if found is None:
        return not_found()
    if request.method != "POST":
        return error(405, "method_not_allowed", _("Use POST."))
    try:
        ACTIONS[name](found, actor=request.user)
    except IllegalTransition as exc:
        return error(409, "illegal_transition", str(exc),
                     status=selectors.download_of(request.user, found.pk).current_status)
    except services.QueueFull as exc:
        return error(429, "queue_full", str(exc))
    found = selectors.download_of(request.user, found.pk)
    return JsonResponse(download_json(selectors.download_state(found), request))


def _finished_video(request, download_id):
    found = _mine(request, download_id)
    if found is None:
        return None, not_found()
    if found.current_status != "successful":
        return None, error(409, "illegal_transition", _("The download has not finished yet."))
    return found, None


def download_file(request, download_id):
    """The file, served as the page serves it (ranges, If-Range, HEAD), with the API's refusals."""
    found = _mine(request, download_id)
    if found is None:
        return not_found()
    if request.method not in ("GET", "HEAD"):
        return error(405, "method_not_allowed", _("Use GET."))  # HEAD goes without saying
    response = views.file_response(request, found)
    if response is None:
        return _no_file(found)
    if response.status_code == 416:
        # An error document like every refusal here, still saying the file's size.
        refused = error(416, "range_not_satisfiable", _("The range lies outside the file."))
        refused["Content-Range"] = response["Content-Range"]
        return refused
    return response


def _no_file(download):
    """409, as for shots: the download is there, but its state gives no file (yet)."""
    status = download.current_status
    if status in (DownloadStatus.SUCCESSFUL, DownloadStatus.EVICTED):  # removed to make room
        message = _("Evicted — download again to get the file back (it was removed to make room).")
    else:
        message = _("The download has not finished yet.")
    return error(409, "illegal_transition", message, status=status)


def _cv_queue_unavailable(exc):
    """503: the CV queue's Redis is down; nothing was queued, and asking again later may work."""
    response = error(503, "cv_queue_unavailable", str(exc), queue=exc.queue)
    response["Retry-After"] = "30"
    return response


def segment(request, download_id):
    found, failure = _finished_video(request, download_id)
    if failure:
        return failure
    if request.method != "POST":
        return error(405, "method_not_allowed", _("Use POST."))
    try:
        job = shots.asset_segment(found.asset, owner=request.user)
    except IllegalTransition as exc:
        return error(409, "illegal_transition", str(exc))
    except TransportUnavailable as exc:
        return _cv_queue_unavailable(exc)
    except shots.CVQueueFull as exc:
        return error(429, "queue_full", str(exc), limit=exc.limit)
    return JsonResponse({"segment": shots.job_state(job)}, status=202)


def shots_list(request, download_id):
    found, failure = _finished_video(request, download_id)
    if failure:
        return failure
    if request.method != "GET":
        return error(405, "method_not_allowed", _("Use GET."))
    state = shots.shots_state(found)
    notes = insight_selectors.insights_by_subject(request.user, InsightKind.SHOT_NOTES,
                                                  [shot["id"] for shot in state["shots"]])
    for shot in state["shots"]:
        # The page's <img> tags take the paths as they are; a script gets URLs it can fetch.
        shot["thumbnail_url"] = _absolute(request, shot["thumbnail_url"])
        if shot["analysis"] is not None:
            shot["analysis"]["keyframe_strip_url"] = _absolute(
                request, shot["analysis"]["keyframe_strip_url"])
        shot["notes"] = insight_link(request, InsightKind.SHOT_NOTES, shot["id"],
                                     notes.get(str(shot["id"])))
    return JsonResponse({"segment": state["segment"], "shots": state["shots"]})


def analyze(request, shot_id):
    number = jsonapi.number_id(shot_id)
    shot = shots.shot_of(request.user, number) if number is not None else None
    if shot is None:
        return error(404, "not_found", _("No such shot."))
    if request.method != "POST":
        return error(405, "method_not_allowed", _("Use POST."))
    try:
        job = shots.shot_analyze(shot, owner=request.user)
    except IllegalTransition as exc:
        return error(409, "illegal_transition", str(exc))
    except TransportUnavailable as exc:
        return _cv_queue_unavailable(exc)
    except shots.CVQueueFull as exc:
        return error(429, "queue_full", str(exc), limit=exc.limit)
    return JsonResponse({"shot": shot.pk, "analysis_job": shots.job_state(job)}, status=202)
