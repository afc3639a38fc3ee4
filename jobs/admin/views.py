"""The admin's own pages: the dashboard, up next, queues and workers (routed by JobAdmin.get_urls).

Each view takes the JobAdmin first; the admin site has already checked that
the user is active staff, and each view checks the permission it needs. A
request from htmx (the live refresh) gets the page's partial only.
"""

import json
from datetime import timedelta

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from jobs import bounds, conf, services
from jobs.admin import charts
from jobs.admin import dashboard as dashboards
from jobs.engine import order, registry
from jobs.exceptions import IllegalTransition
from jobs.models import CLAIMABLE, PARKED, Job, JobStatus, Queue, Worker
from jobs.selectors import standing as selectors
from jobs.selectors.counts import queue_latencies, state_counts
from jobs.selectors.present import KindPrefixes

PER_PAGE = 200  # jobs listed on one page of "up next"
COUNT_CAP = 100_000  # READY jobs counted at most, per queue and page view
REFRESH_S = 5  # live refresh interval
MAX_PAGE = COUNT_CAP // PER_PAGE + 1  # past the counted jobs there is nothing to number


def _render(model_admin, request, template, context):
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    partial = f"admin/jobs/partials/{template}"
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "refresh_s": REFRESH_S,
        "now": timezone.now(),
        "partial": partial,
        **context,
    }
    # The header itself, not django-htmx's middleware: a project installing the engine need
    # not add that middleware for the admin's live pages.
    refresh = request.headers.get("HX-Request") == "true"
    return TemplateResponse(request, partial if refresh else f"admin/jobs/{template}", context)


# --- Up next -------------------------------------------------------------------------


def ready_count(queue):
    """READY jobs of `queue`, counted up to COUNT_CAP (each half through its partial index)."""
    return sum(
        Job.objects.filter(half, queue=queue).order_by()[:COUNT_CAP].count()
        for half in (CLAIMABLE, PARKED)
    )


def up_next(model_admin, request):
    queues = sorted(selectors.queue_names(), key=lambda name: (name != "default", name))
    queue = request.GET.get("queue") or (queues[0] if queues else "default")
    if queue not in queues:
        queues.append(queue)
    try:
        page = min(max(1, int(request.GET.get("page", 1))), MAX_PAGE)
    except ValueError:
        page = 1
    offset = (page - 1) * PER_PAGE
    served = selectors.live_kinds()
    jobs = order.ready_in_order(queue, offset=offset, limit=PER_PAGE, related=("owner",))
    rows = [(offset + i, job, selectors.standing(job, served_kinds=served))
            for i, job in enumerate(jobs, start=1)]
    total = ready_count(queue)
    running = list(Job.objects.filter(queue=queue, status=JobStatus.RUNNING)
                   .select_related("owner", "worker").order_by("started_at", "pk")[:100])
    for job in running:
        job.progress_view = progress(job)
    for job in [*running, *jobs]:
        job.kind_label = registry.label(job.kind)
    allowed = {a.name for a in model_admin.allowed_actions(request)}
    return _render(model_admin, request, "up_next.html", {
        "title": _("Up next"),
        "queue": queue,
        "queues": queues,
        "queue_row": Queue.objects.filter(name=queue).first(),
        "rows": rows,
        "running": running,
        "total": total,
        "total_capped": total >= COUNT_CAP,
        "page": page,
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if offset + len(rows) < total else None,
        "allowed": allowed,
        "here": request.get_full_path(),
    })


# --- Queues ------------------------------------------------------------------------


class QueueLimitsForm(forms.Form):
    concurrency = forms.IntegerField(label=gettext_lazy("Global limit"), min_value=0,
                                     max_value=bounds.LIMIT_MAX, required=False,
                                     help_text=gettext_lazy("Jobs of this queue running at once across all "
                                                 "workers; empty for no limit."))
    gap_seconds = forms.FloatField(label=gettext_lazy("Gap (seconds)"), min_value=0,
                                   max_value=bounds.GAP_SECONDS_MAX, required=False,
                                   help_text=gettext_lazy("The queue rests this long after each start and after each "
                                                          "job ends, before the next one starts."))


def queues(model_admin, request):
    names = selectors.queue_names()
    counts = state_counts(names)
    counts = dict(sorted(counts.items(), key=lambda item: (item[0] != "default", item[0])))
    rows = {row.name: row for row in Queue.objects.all()}
    latency = queue_latencies()
    serving = {}
    cutoff = timezone.now() - timedelta(seconds=conf.JOBS_WORKER_DEAD_AFTER_SECONDS)
    for served in Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=cutoff).values_list(
        "queues", flat=True
    ):
        for name in served:
            serving[name] = serving.get(name, 0) + 1
    table = []
    for name, states in counts.items():
        row = rows.get(name)
        table.append({
            "name": name,
            "row": row,
            "states": [(JobStatus(s).label, n, exact) for s, (n, exact) in states.items()],
            "latency_s": latency.get(name),
            "workers": serving.get(name, 0),
            "form": QueueLimitsForm(initial={
                "concurrency": row.concurrency if row else None,
                "gap_seconds": row.gap_seconds if row else 0,
            }, prefix=name),
        })
    return _render(model_admin, request, "queues.html", {
        "title": _("Queues"),
        "table": table,
        "states": [label for _value, label in JobStatus.choices],
        "can_manage": model_admin.has_manage_queues_permission(request),
    })


def queue_operation(model_admin, request, name, operation):
    """POST: pause, resume, or set the limits of a queue, for the whole fleet."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_manage_queues_permission(request):
        raise PermissionDenied
    if name not in selectors.queue_names():
        raise Http404  # a queue exists by its jobs, its kinds or its row; a POST never makes one
    back = reverse("admin:jobs_job_queues")
    if operation in ("pause", "resume"):
        changes = {"paused": operation == "pause"}
        text = _("Paused the queue %(queue)s.") if operation == "pause" else _(
            "Resumed the queue %(queue)s.")
    elif operation == "limits":
        form = QueueLimitsForm(request.POST, prefix=name)
        if not form.is_valid():
            messages.error(request, _("The limit must be a whole number from 0 to %(limit)d and the "
                                      "gap a number of seconds from 0 to %(gap)d.")
                           % {"limit": bounds.LIMIT_MAX, "gap": bounds.GAP_SECONDS_MAX})
            return HttpResponseRedirect(back)
        changes = {"concurrency": form.cleaned_data["concurrency"],
                   "gap_seconds": form.cleaned_data["gap_seconds"] or 0.0}
        text = _("Changed the limits of the queue %(queue)s.")
    else:
        raise Http404
    services.set_queue(name, **changes)  # workers see it within a second
    model_admin.log_change(request, Queue.objects.get(name=name),
                           [{"changed": {"fields": sorted(changes)}}])
    messages.success(request, text % {"queue": name})
    return HttpResponseRedirect(back)


# --- Workers ---------------------------------------------------------------------------


def workers(model_admin, request):
    now = timezone.now()
    recent = now - timedelta(hours=1)
    listed = list(
        Worker.objects.filter(stopped_at__isnull=True).order_by("name")[:500]
    ) + list(Worker.objects.filter(stopped_at__gte=recent).order_by("-stopped_at")[:50])
    running = {}
    for job in Job.objects.filter(status=JobStatus.RUNNING, worker__in=listed).order_by("pk").only(
        "pk", "kind", "worker_id", "progress", "phase", "stop_requested"
    ):
        running.setdefault(job.worker_id, []).append(job)
    dead_after = conf.JOBS_WORKER_DEAD_AFTER_SECONDS
    rows = []
    for worker in listed:
        age = (now - worker.heartbeat_at).total_seconds()
        rows.append({
            "worker": worker,
            "age_s": age,
            "late": worker.stopped_at is None and age > dead_after,
            "jobs": running.get(worker.pk, []),
        })
    return _render(model_admin, request, "workers.html", {
        "title": _("Workers"),
        "rows": rows,
        "dead_after_s": dead_after,
        "can_manage": model_admin.has_manage_workers_permission(request),
    })


def worker_command(model_admin, request, worker_id, command):
    """POST: tell a worker to stop claiming ("quiet") or to shut down ("stop")."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_manage_workers_permission(request):
        raise PermissionDenied
    worker = get_object_or_404(Worker, pk=worker_id)
    try:
        services.command_worker(worker, command, actor=request.user)
    except (IllegalTransition, ValueError) as exc:
        messages.warning(request, str(exc))
    else:
        model_admin.log_change(request, worker, [{"changed": {"fields": ["command"]}}])
        messages.success(request, _("Told %(worker)s to %(command)s; it obeys at its next heartbeat.")
                         % {"worker": worker.name, "command": Worker.Command(command).label})
    return HttpResponseRedirect(reverse("admin:jobs_job_workers"))


# --- Pieces of the job's page ------------------------------------------------------------

_progress_words = KindPrefixes()  # kind prefix -> describe(progress_message) -> words


def register_progress_words(kind_prefix, describe):
    """Say how the progress message of a kind reads, for kinds that carry figures in it:

        register_progress_words("downloads.", lambda message: "3.2 MB of 10 MB")
    """
    _progress_words.register(kind_prefix, describe)


def progress_words(job):
    """The job's progress message as a person reads it (the longest registered prefix wins)."""
    describe = _progress_words.lookup(job.kind)
    if describe is not None and job.progress_message:
        return describe(job.progress_message)
    return job.progress_message


def progress(job):
    """What the progress bar of a job shows: {percent (None: unknown), phase, words, live}."""
    return {"percent": None if job.progress is None else round(job.progress * 100),
            "phase": job.phase, "words": progress_words(job),
            "live": job.status == JobStatus.RUNNING}



def pretty(value):
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def seconds_text(seconds):
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
    if minutes:
        return _("%(m)d min %(s)d s") % {"m": minutes, "s": secs}
    return _("%(s)d s") % {"s": secs}


def durations(job, now=None):
    """[(label, text)] for how long the job waited, ran (its latest attempt) and took in all."""
    now = now or timezone.now()
    parts = []
    if job.started_at:
        parts.append((_("waited"), seconds_text((job.started_at - job.enqueued_at).total_seconds())))
        end = job.finished_at or (now if job.status == JobStatus.RUNNING else None)
        if end:
            parts.append((_("ran"), seconds_text((end - job.started_at).total_seconds())))
    end = job.finished_at or now
    parts.append((_("in all") if job.finished_at else _("so far"),
                  seconds_text((end - job.enqueued_at).total_seconds())))
    return parts


def timeline(job):
    """The job's history, oldest first: its events (with who and why) and the times on its row."""
    entries = [{"at": job.enqueued_at, "what": _("enqueued"), "actor": None, "reason": "",
                "attempt": None, "data": ""}]
    for event in job.events.select_related("actor"):
        entries.append({"at": event.at, "what": event.get_kind_display(), "actor": event.actor,
                        "reason": event.reason, "attempt": event.attempt or None,
                        "data": json.dumps(event.data, sort_keys=True) if event.data else ""})
    if job.started_at:
        entries.append({"at": job.started_at, "what": _("latest attempt started"), "actor": None,
                        "reason": "", "attempt": job.attempts or None, "data": ""})
    if job.finished_at:
        entries.append({"at": job.finished_at, "what": job.get_status_display(), "actor": None,
                        "reason": job.error, "attempt": job.attempts or None, "data": ""})
    entries.sort(key=lambda entry: entry["at"])
    return entries


# --- Dashboard -----------------------------------------------------------------------------


def dashboard(model_admin, request):
    """The queue over time: finished per minute by outcome, depth, latency, running, slowest kinds."""
    range_name = request.GET.get("range", "hour")
    if range_name not in dashboards.RANGES:
        range_name = "hour"
    queues = selectors.queue_names()
    queue = request.GET.get("queue", "")[:100]
    queue = queue if queue in queues else ""
    board = dashboards.build(range_name, queue=queue, kind=request.GET.get("kind", "")[:200])
    kinds = dashboards.kinds_seen(board.start)
    if board.kind and board.kind not in kinds:
        board = dashboards.build(range_name, queue=queue)  # a kind nobody ran: every kind
    return _render(model_admin, request, "dashboard.html", {
        "title": _("Dashboard"),
        "board": board,
        "charts": dashboard_charts(board),
        "ranges": list(dashboards.RANGE_LABELS.items()),
        "queues": queues,
        "kinds": kinds,
        "slot_minutes": int(board.slot.total_seconds() // 60),
        "first_label": _slot_label(board.slots[0].start, board.slot),
        "last_label": _slot_label(board.slots[-1].start, board.slot),
    })


def _slot_label(start, slot):
    """A slot's start as the axis says it: the time, and the day too on the day's chart."""
    local = timezone.localtime(start)
    return local.strftime("%H:%M") if slot < timedelta(minutes=15) else local.strftime("%d %b %H:%M")


def _count(n):
    return f"{n:,}"


def dashboard_charts(board):
    """The dashboard's charts, one column per slot of `board`."""
    finished = charts.Chart("finished", _("Jobs finished, by outcome"), [
        ("succeeded", _("succeeded")), ("failed", _("failed")), ("cancelled", _("cancelled")),
        ("retried", _("retried"))], fmt=_count)
    depth = charts.Chart("depth", _("Queue depth (runnable jobs)"), [("ready", _("runnable"))],
                         fmt=_count)
    latency = charts.Chart("latency", _("Latency (the oldest runnable job's wait)"),
                           [("latency_s", _("waited"))], fmt=seconds_text)
    running = charts.Chart("running", _("Running jobs"), [("running", _("running"))], fmt=_count)
    for slot in board.slots:
        key = slot.start.isoformat()
        label = _slot_label(slot.start, board.slot)
        finished.columns.append(charts.Column(key, label, {
            "succeeded": slot.succeeded, "failed": slot.failed, "cancelled": slot.cancelled,
            "retried": slot.retried}))
        depth.columns.append(charts.Column(key, label, {"ready": slot.ready}))
        latency.columns.append(charts.Column(key, label, {"latency_s": slot.latency_s}))
        running.columns.append(charts.Column(key, label, {"running": slot.running}))
    return [finished, depth, latency, running]
