"""The JSON API for insights and the user's queue (session or bearer token; CSRF applies to
sessions).

    GET   /api/insights/                   yours, most recently asked first
    POST  /api/insights/                   {"kind", "subject", "priority": "interactive"|"prefetch"}
    GET   /api/insights/<id>/              status, place in the queue, text, error
    POST  /api/insights/retry-failed/      queue every failed one again, now
    GET   /api/queue/                      your jobs of every kind, in the order workers take them

A POST for an insight that exists returns it (promoted when asked at a higher
tier): 202 while it is being made, 200 once it is final. Errors are JSON
{"error": sentence, "error_code": code}: 400 bad input, 401 anonymous, 404 not
yours or no such id, 405. GETs only read.
"""

from django.http import JsonResponse
from django.urls import reverse
from django.utils.translation import get_language
from django.utils.translation import gettext as _

from core import jsonapi
from core.jsonapi import error
from insights import data, selectors, services
from insights.models import InsightKind

LIST_LIMIT = 200


def _iso(value):
    return value.isoformat() if value else None


def insight_json(state, request):
    insight = state.insight
    return {
        "id": str(insight.pk),
        "url": request.build_absolute_uri(reverse("insights:api_insight", args=[insight.pk])),
        "kind": insight.kind,
        "subject": insight.subject,
        "status": state.status,
        "status_label": state.status_label,
        "priority": state.tier,
        "queue_position": state.queue_position,
        "waiting_code": state.waiting_code or None,
        "waiting_reason": state.waiting_reason or None,
        "attempts": state.attempts,
        "max_attempts": state.max_attempts,
        "text": insight.text or None,
        "updating": state.updating,
        "generator": insight.generator or None,
        "model": insight.model or None,
        "generated_at": _iso(insight.generated_at),
        "language": insight.language,
        "error": state.error or None,
        "error_code": state.error_code or None,
        "requested_at": _iso(insight.requested_at),
    }


def insights(request):
    if request.method == "GET":
        served = selectors.served_kinds()
        rows = selectors.insights_of(request.user)[:LIST_LIMIT]
        return JsonResponse({"insights": [
            insight_json(selectors.insight_state(i, served_kinds=served), request) for i in rows]})
    if request.method != "POST":
        return error(405, "method_not_allowed", _("Use GET or POST."))
    try:
        body = jsonapi.json_object(request)
        kind = jsonapi.text(body, "kind")
        tier = jsonapi.text(body, "priority", default="interactive")
    except jsonapi.BadRequest as exc:
        return exc.response()
    subject = body.get("subject")
    if kind not in InsightKind.values:
        return error(400, "invalid", _("Unknown kind; use one of: %(kinds)s.")
                     % {"kinds": ", ".join(InsightKind.values)}, field="kind")
    if tier not in services.TIERS:
        return error(400, "invalid", _("The priority must be “interactive” or “prefetch”."),
                     field="priority")
    if not isinstance(subject, str | int) or isinstance(subject, bool):
        return error(400, "invalid", _("Give the subject as a string or a number."), field="subject")
    try:
        insight = services.insight_request(owner=request.user, kind=kind, subject=subject,
                                           tier=tier, language=get_language())
    except data.SubjectInvalid as exc:
        return error(400, "invalid", str(exc), field="subject")
    except services.SubjectNotFound:
        return error(404, "not_found", _("No such subject."))
    except data.Unavailable as exc:
        return error(404, "unavailable", str(exc))
    except services.TooManyQueued as exc:
        return error(429, "queue_full", str(exc), limit=exc.limit)
    state = selectors.insight_state(selectors.insight_of(request.user, insight.pk))
    response = JsonResponse(insight_json(state, request), status=202 if state.is_live else 200)
    response["Location"] = reverse("insights:api_insight", args=[insight.pk])
    return response


def insight(request, insight_id):
    if request.method != "GET":
        return error(405, "method_not_allowed", _("Use GET."))
    found = selectors.insight_of(request.user, insight_id)
    if found is None:
        return error(404, "not_found", _("No such insight."))
    return JsonResponse(insight_json(selectors.insight_state(found), request))


def retry_failed(request):
    if request.method != "POST":
        return error(405, "method_not_allowed", _("Use POST."))
    retried, skipped = services.insights_retry_failed(request.user)
    return JsonResponse({"retried": retried, "skipped": skipped})


def _ref_json(subject, request):
    if subject is None or subject.ref is None:
        return None
    return {**subject.ref, "url": request.build_absolute_uri(subject.ref["url"])}


def entry_json(entry, request):
    job = entry.job
    return {
        "id": str(job.public_id),
        "kind": job.kind,
        "label": entry.label,
        "subject": entry.subject.words if entry.subject else None,
        # What the job stands for, so a client can tie it to its own objects.
        "for": _ref_json(entry.subject, request),
        "queue": job.queue,
        "status": entry.status,
        "status_label": entry.status_label,
        "priority": job.priority,
        "tier": entry.tier,
        "queue_position": entry.queue_position,
        "waiting_reason": entry.waiting_reason or None,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "progress": job.progress,
        "error": job.error or None,
        "error_code": job.error_code or None,
        "enqueued_at": _iso(job.enqueued_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }


def settings_json(setting):
    return {
        "queue": setting.name,
        "paused": setting.paused,
        "concurrency": setting.concurrency,
        "gap_seconds": setting.gap_seconds,
        "max_attempts": setting.max_attempts,
        "cooldown_seconds": setting.cooldown_s,
    }


def queue(request):
    if request.method != "GET":
        return error(405, "method_not_allowed", _("Use GET."))
    entries = selectors.queue_of(request.user)
    settings = selectors.queue_settings(selectors.queue_names_of(entries))
    return JsonResponse({"jobs": [entry_json(e, request) for e in entries],
                         "queues": [settings_json(s) for s in settings]})
