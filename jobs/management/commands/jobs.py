"""`manage.py jobs`: the queue from a terminal, for operators.

    jobs status                         queues (counts, latency, paused, limits) and workers
    jobs show <id>                      one job: what its admin page shows
    jobs retry  [filters] [--dry-run]   retry the FAILED jobs matching
    jobs cancel [filters] [--dry-run]   cancel the queued, running or paused jobs matching

Filters are the admin list's (jobs/selectors/filters.py): --kind, --queue, --error-code,
--older-than, --owner, --state, --since, --until, --unique-key, --payload.
Retry and cancel go through the engine's services, one job at a time, as the
admin's "all matching" does. Every subcommand prints a table, or JSON with --json.
"""

import json
import uuid
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobs import conf, services
from jobs.admin import redact
from jobs.admin import views as admin_views
from jobs.engine import dependencies
from jobs.models import Job, JobStatus, Queue, Worker
from jobs.selectors import standing as selectors
from jobs.selectors.counts import queue_latencies, state_counts
from jobs.selectors.filters import FilterError, JobFilter

DRY_RUN_LISTED = 1000  # jobs a dry run lists; it counts them all


class Command(BaseCommand):
    help = "Look at and steer the queue: status, show <id>, retry and cancel with filters."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{status,show,retry,cancel}")

        def action(name, words):
            sub = actions.add_parser(name, help=words)
            sub.add_argument("--json", action="store_true", help="JSON instead of a table")
            return sub

        action("status", "queues and workers")
        action("show", "one job, by its number or public id").add_argument(
            "job", help="the job's number or public id")
        for name, words in (("retry", "retry FAILED jobs"),
                            ("cancel", "cancel queued, running or paused jobs")):
            sub = action(name, f"{words} matching the filters")
            sub.add_argument("--kind", default="")
            sub.add_argument("--queue", default="")
            sub.add_argument("--error-code", default="")
            sub.add_argument("--older-than", default="", help="queued longer ago than this: 90m, 12h, 30d")
            sub.add_argument("--owner", default="", help="the owner's user name")
            sub.add_argument("--state", default="", help="narrow further by state (comma-separated)")
            sub.add_argument("--since", default="", help="queued on or after: YYYY-MM-DD[ HH:MM]")
            sub.add_argument("--until", default="", help="queued on or before: YYYY-MM-DD[ HH:MM]")
            sub.add_argument("--unique-key", default="")
            sub.add_argument("--payload", default="", help="a payload field: key=value, a.b=value")
            sub.add_argument("--reason", default="", help="noted in each job's timeline")
            sub.add_argument("--dry-run", action="store_true", help="list what would change; change nothing")
            sub.add_argument("--all", action="store_true", help="allow no filter at all (every job)")

    def handle(self, *args, action, **options):
        self.as_json = options.pop("json")
        if action == "status":
            return self.status()
        if action == "show":
            return self.show(options["job"])
        return self.act(action, **options)

    # --- status --------------------------------------------------------------------------

    def status(self):
        now = timezone.now()
        names = selectors.queue_names()
        counts = state_counts(names)
        latency = queue_latencies(now)
        rows = {row.name: row for row in Queue.objects.all()}
        queues = []
        for name, states in counts.items():
            row = rows.get(name)
            queues.append({
                "queue": name,
                # Finished states may be estimates (None: unknown) once the table is large.
                "jobs": {status.lower(): n for status, (n, _exact) in states.items()},
                "exact": all(exact for _n, exact in states.values()),
                "latency_s": round(latency.get(name, 0.0), 3),
                "paused": bool(row and row.paused),
                "concurrency": row.concurrency if row else None,
                "gap_s": row.gap_seconds if row else 0.0,
            })
        dead_after = conf.JOBS_WORKER_DEAD_AFTER_SECONDS
        workers = []
        for worker in Worker.objects.filter(stopped_at__isnull=True).order_by("name")[:500]:
            age = max(0.0, (now - worker.heartbeat_at).total_seconds())
            workers.append({
                "worker": worker.name, "host": worker.host, "pid": worker.pid,
                "queues": worker.queues, "concurrency": worker.concurrency,
                "heartbeat_age_s": round(age, 1), "late": age > dead_after,
                "command": worker.command,
            })
        if self.as_json:
            return self.emit({"queues": queues, "workers": workers})
        states = [s.lower() for s in JobStatus.values]
        self.table(["queue", *states, "latency", "queue_paused", "limit", "gap"], [
            [q["queue"], *(_n(q["jobs"][s]) for s in states), f"{q['latency_s']:.0f}s",
             "yes" if q["paused"] else "no",
             "-" if q["concurrency"] is None else q["concurrency"], f"{q['gap_s']:g}s"]
            for q in queues])
        self.stdout.write("")
        if not workers:
            self.stdout.write("No live worker.")
            return None
        self.table(["worker", "host", "pid", "queues", "concurrency", "heartbeat"], [
            [w["worker"], w["host"], w["pid"], ",".join(w["queues"]), w["concurrency"],
             f"{w['heartbeat_age_s']:.0f}s ago" + (" LATE" if w["late"] else "")] for w in workers])
        return None

    # --- show ----------------------------------------------------------------------------

    def show(self, ref):
        job = _find(ref)
        standing = None if job.is_finished else selectors.standing(job)
        document = {
            "id": job.pk, "public_id": str(job.public_id), "kind": job.kind, "queue": job.queue,
            "status": job.status, "standing": standing.message if standing else None,
            "position": standing.position if standing else None,
            "priority": job.priority, "manual_position": job.position,
            "owner": job.owner.get_username() if job.owner else None,
            "unique_key": job.unique_key, "fingerprint": job.fingerprint,
            "concurrency_keys": job.concurrency_keys, "rate_key": job.rate_key,
            "blocked_key": job.blocked_key, "on_dependency_failure": job.on_dependency_failure,
            "stop_requested": job.stop_requested, "attempts": job.attempts,
            "max_attempts": job.max_attempts, "snoozes": job.snoozes,
            "run_after": _iso(job.run_after), "worker": job.worker.name if job.worker else None,
            "worker_ids": job.worker_ids, "lease_expires_at": _iso(job.lease_expires_at),
            "progress": job.progress, "phase": job.phase,
            "progress_message": admin_views.progress_words(job),
            "enqueued_at": _iso(job.enqueued_at), "started_at": _iso(job.started_at),
            "finished_at": _iso(job.finished_at),
            "durations": {str(label): text for label, text in admin_views.durations(job)},
            "payload": redact(job.payload), "result": redact(job.result),
            "error_code": job.error_code, "error": job.error,
            "timeline": [{"at": _iso(e["at"]), "what": str(e["what"]), "attempt": e["attempt"],
                          "actor": str(e["actor"]) if e["actor"] else None, "reason": e["reason"],
                          "data": e["data"]} for e in admin_views.timeline(job)],
            "failed_attempts": [{k: v for k, v in entry.items() if k != "traceback"}
                                for entry in job.errors or []],
            # The job page's "Workflow" table: what it waits for and what waits for it.
            "parents": [_link(other) for other in dependencies.parents_of(job)],
            "children": [_link(other) for other in dependencies.dependents_of(job)],
        }
        if self.as_json:
            return self.emit(document)
        simple = {k: v for k, v in document.items()
                  if k not in ("timeline", "failed_attempts", "payload", "result", "durations",
                               "parents", "children")}
        width = max(len(k) for k in simple)
        for key, value in simple.items():
            if value not in (None, "", []):
                self.stdout.write(f"{key.ljust(width)}  {_text(value)}")
        self.stdout.write(f"{'durations'.ljust(width)}  "
                          + ", ".join(f"{k} {v}" for k, v in document["durations"].items()))
        for name in ("payload", "result"):
            self.stdout.write(f"{name.ljust(width)}  {json.dumps(document[name], sort_keys=True)}")
        self.stdout.write("\nTimeline:")
        self.table(["at", "what", "attempt", "who", "why"], [
            [e["at"], e["what"], e["attempt"] or "", e["actor"] or "", e["reason"]]
            for e in document["timeline"]])
        for name, title in (("parents", "Waits for"), ("children", "Waited for by")):
            if document[name]:
                self.stdout.write(f"\n{title}:")
                self.table(["id", "kind", "status"],
                           [[e["id"], e["kind"], e["status"]] for e in document[name]])
        if document["failed_attempts"]:
            self.stdout.write("\nFailed attempts:")
            self.table(["attempt", "code", "at", "message"], [
                [e.get("attempt"), e.get("code"), e.get("at"), e.get("message")]
                for e in document["failed_attempts"]])
        return None

    # --- retry and cancel ------------------------------------------------------------------

    def act(self, action, *, dry_run, reason, **raw):
        try:
            job_filter = JobFilter.parse(
                kind=raw["kind"], queue=raw["queue"], error_code=raw["error_code"],
                older_than=raw["older_than"], owner=raw["owner"], status=raw["state"],
                since=raw["since"], until=raw["until"], unique_key=raw["unique_key"],
                payload=raw["payload"])
        except FilterError as exc:
            raise CommandError(str(exc)) from None
        if not job_filter and not raw["all"]:
            raise CommandError(f"Give at least one filter (--kind, --queue, ...), or --all to {action} "
                               "every job that allows it.")
        matching = job_filter.apply(Job.objects.all())
        legal = services.LEGAL[f"{action}_matching"]
        if dry_run:
            chosen = matching.filter(status__in=legal)
            count = chosen.count()
            jobs = list(chosen.order_by("pk")[:DRY_RUN_LISTED])
            if self.as_json:
                return self.emit({"action": action, "dry_run": True, "matching": count,
                                  "filters": dict(job_filter.describe()),
                                  "jobs": [_summary(job) for job in jobs]})
            self.table(["id", "kind", "queue", "status", "error_code", "enqueued"],
                       [list(_summary(job).values()) for job in jobs])
            more = f" (the first {len(jobs)} listed)" if count > len(jobs) else ""
            self.stdout.write(f"Would {action} {count} job(s){more}; nothing was changed.")
            return None
        service = services.retry_matching if action == "retry" else services.cancel_matching
        changed, skipped = service(matching, reason=reason)
        if self.as_json:
            return self.emit({"action": action, "dry_run": False, "changed": changed,
                              "skipped": skipped, "filters": dict(job_filter.describe())})
        done = "Retried" if action == "retry" else "Cancelled (running ones stop at their next check)"
        self.stdout.write(f"{done}: {changed} job(s); skipped {skipped} whose state changed meanwhile.")
        return None

    # --- output ----------------------------------------------------------------------------

    def emit(self, document):
        self.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str))

    def table(self, headers, rows):
        rows = [[_text(cell) for cell in row] for row in rows]
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
        for line in ([h.upper() for h in headers], *rows):
            self.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _find(ref):
    ref = str(ref).strip()
    try:
        if ref.isascii() and ref.isdigit() and len(ref) <= 18:
            return Job.objects.select_related("owner", "worker").get(pk=int(ref))
        return Job.objects.select_related("owner", "worker").get(public_id=uuid.UUID(ref))
    except (Job.DoesNotExist, ValueError):
        raise CommandError(f"No job {ref!r}: give a job's number or its public id.") from None


def _summary(job):
    return {"id": job.pk, "kind": job.kind, "queue": job.queue, "status": job.status,
            "error_code": job.error_code, "enqueued": _iso(job.enqueued_at)}


def _iso(moment):
    return moment.isoformat() if moment else None


def _n(value):
    return "?" if value is None else value


def _text(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    return "" if value is None else " ".join(str(value).split())


def _link(job):
    return {"id": job.pk, "kind": job.kind, "status": job.status}
