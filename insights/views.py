"""The insight pages: the panel other pages embed, the user's insights and their queue.

A page that embeds the panel asks for its insight with a POST fired on load
(CSRF-protected, at interactive priority); the panel then polls its own
partial with GETs, which only read, and the partial of a final insight comes
back without the polling trigger, so htmx stops asking. When the page learns
that the insight's data changed (the video page's shots arrive), the panel
asks again with the same POST, so the newer text is made at interactive
priority instead of waiting behind background work. Every view looks
insights up through the owner, so another user's id is a 404.
"""

from django.contrib import messages
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import get_language, ngettext
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from insights import data, selectors, services
from insights.models import InsightKind
from jobs.exceptions import IllegalTransition

LIST_LIMIT = 200

# The event a page fires (an HX-Trigger header) when the data of the insights it shows has
# changed while it is open; each panel then asks for its insight again (_panel_body.html).
DATA_CHANGED = "insight-data-changed"


def _mine(request, insight_id):
    found = selectors.insight_of(request.user, insight_id)
    if found is None:
        raise Http404
    return found


def _back(request, fallback="insights:list"):
    target = request.POST.get("next") or request.headers.get("Referer")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        # A URL as it is: redirect() would read "0" or "home" as a view's name.
        return HttpResponseRedirect(target)
    return redirect(fallback)


def _panel(request, insight, *, notice="", status=200):
    state = selectors.insight_state(insight)
    return render(request, "insights/_panel_body.html", {"state": state, "notice": notice},
                  status=status)


@require_POST
def insight_request(request):
    """Ask for one insight at interactive priority and answer with its panel."""
    kind, subject = request.POST.get("kind", ""), request.POST.get("subject", "")
    if kind not in InsightKind.values:
        raise Http404
    try:
        insight = services.insight_request(owner=request.user, kind=kind, subject=subject,
                                           tier="interactive", language=get_language())
    except (data.SubjectInvalid, services.SubjectNotFound):
        raise Http404 from None
    except data.Unavailable as exc:
        return render(request, "insights/_panel_unavailable.html",
                      {"kind": InsightKind(kind), "message": str(exc)})
    except services.TooManyQueued as exc:
        if not request.htmx:
            messages.warning(request, str(exc))
            return _back(request)
        # Said in the panel: htmx 2 swaps no 4xx answer (the API answers 429).
        return render(request, "insights/_panel_unavailable.html",
                      {"kind": InsightKind(kind), "message": str(exc)})
    if not request.htmx:
        return _back(request)
    return _panel(request, selectors.insight_of(request.user, insight.pk))


@require_GET
def insight_panel(request, insight_id):
    return _panel(request, _mine(request, insight_id))


@require_POST
def insight_retry(request, insight_id):
    insight = _mine(request, insight_id)
    notice = ""
    try:
        services.insight_retry(insight, actor=request.user)
    except IllegalTransition as exc:
        notice = str(exc)
    if not request.htmx:
        if notice:
            messages.warning(request, notice)
        return _back(request)
    return _panel(request, selectors.insight_of(request.user, insight.pk), notice=notice)


@require_POST
def insights_retry_failed(request):
    retried, skipped = services.insights_retry_failed(request.user)
    if retried:
        messages.success(request, ngettext("Queued %(n)d failed insight again.",
                                           "Queued %(n)d failed insights again.", retried)
                         % {"n": retried})
    else:
        messages.info(request, _("No failed insights to retry."))
    return _back(request, "insights:queue")


@require_GET
def insight_list(request):
    served = selectors.served_kinds()
    insights = list(selectors.insights_of(request.user)[:LIST_LIMIT])
    subjects = selectors.describe_subjects(request.user, insights)
    rows = [(selectors.insight_state(i, served_kinds=served), subjects[i.pk]) for i in insights]
    return render(request, "insights/list.html", {
        "rows": rows, "library_kind": InsightKind.LIBRARY_OVERVIEW, "library": data.LIBRARY,
    })


def _queue_context(request):
    entries = selectors.queue_of(request.user)
    return {
        "entries": entries,
        "settings": selectors.queue_settings(selectors.queue_names_of(entries)),
        "live": any(e.status in ("ready", "running", "paused") for e in entries),
        "has_failed_insights": any(e.status == "failed" and e.job.kind.startswith("insights.")
                                   for e in entries),
    }


@require_GET
def queue(request):
    return render(request, "insights/queue.html", _queue_context(request))


@require_GET
def queue_rows(request):
    return render(request, "insights/_queue_rows.html", _queue_context(request))
