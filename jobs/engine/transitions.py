"""Every change of a job's state but its enqueue and people's verbs: guarded UPDATEs, and
what happens after a job ends.

Each transition is a single guarded UPDATE: it names the states it may start
from and, for a RUNNING job, the lease token of the attempt that holds it. A
late or stale writer (a worker that lost its lease, a second click) matches no
row and changes nothing; the function reports that instead of resurrecting a
cancelled job or overwriting a rescued one. Each transition that happens
frees what the job held (jobs/engine/limits.py) and is noted once
(jobs/engine/history.py), in its own transaction.

What follows a job's final transition is one pipeline, in this order, in the
transaction that made it:

    1. run again for newer data asked of it while it ran    _run_again_for_newer_data
       (before its slots are freed, so the new run waits in its keys' line)
    2. its slots freed, its queue's rest begun              limits.left_running
    3. its dependents decided: released, or cancelled       _decide_dependents
    4. the rollup's count of it                              _count
    5. its kind's own `finished` hook                        _kinds_hook
    6. a failure notice, if it FAILED (JOBS_FAILURE_NOTIFY)  wired: notices.job_failed
    7. `job_finished`, once the transaction commits

`_ended()` runs them, in that order. Steps 1 and 2 are for a job that ran; a
job leaving RUNNING to go on (READY, PAUSED) takes steps 1 and 2 alone.

Steps 1 and 6 sit above the rules (running again enqueues, and enqueueing ends
jobs; the notice is the site's setting), so `wire()` puts them in place once,
from `JobsConfig.ready()` (jobs/apps.py). How the end of an attempt picks its transition is
jobs/engine/outcome.py's rule; workers, the watchdog and the reaper go through
it, never straight here.
"""

import logging
import traceback
from datetime import timedelta
from types import SimpleNamespace

from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import conf, signals
from jobs.engine import dependencies, history, limits, queries, registry, rollup, wakeup
from jobs.models import FINISHED_STATUSES, Job, JobStatus, Outcome

log = logging.getLogger("jobs.services")  # its name before the move: logging configs name it

MAX_ERRORS_KEPT = 10  # per job: enough to see a pattern, bounded so a row stays small

# A finished job run again from the start (a staff retry, a re-arm after the
# cool-down): what its last attempts left on the row is cleared.
FRESH_START = dict(status=JobStatus.READY, attempts=0, snoozes=0, finished_at=None, error="",
                   error_code="", progress=None, phase="", progress_message="",
                   asked_fingerprint="", asked_payload=None)

# The pipeline's steps that sit above the rules (see the top of this module).
_above = SimpleNamespace(run_again=None, notify_failure=None)


def wire(*, run_again, notify_failure):
    """Put the pipeline's upper steps in place: `run_again(job, fingerprint, payload)` queues a
    job again for newer data (`payload` None: its own); `notify_failure(job)` tells people of a
    job that failed for good."""
    _above.run_again, _above.notify_failure = run_again, notify_failure


# --- After a job ends ------------------------------------------------------------


# How the rollup counts each final state (jobs/engine/rollup.py).
_COUNTED = {JobStatus.SUCCESSFUL: "succeeded", JobStatus.FAILED: "failed",
            JobStatus.CANCELLED: "cancelled"}


def _ended(entries, status, *, ran, asked=None, has_dependents=None):
    """What follows jobs' final transition to `status`, in the transaction that made it: the
    pipeline of this module's docstring, step by step.

    `entries` are (job, the row's new values); `ran` when they left RUNNING. `asked`
    holds each job's (asked fingerprint, asked payload) when the caller's UPDATE returned
    them (read otherwise); `has_dependents` the ids whose row was flagged, likewise.
    """
    jobs = [job for job, _fields in entries]
    if ran:
        _run_again_for_newer_data(jobs, status, asked)   # 1
        limits.left_running(jobs)                        # 2
    _decide_dependents(jobs, has_dependents)             # 3
    now = timezone.now()
    for job, fields in entries:
        _finished_in_memory(job, status, fields, now)
    _count(jobs, status, ran=ran, now=now)               # 4
    for job in jobs:
        _kinds_hook(job)                                 # 5
        if status == JobStatus.FAILED:
            _guarded(_above.notify_failure, job,         # 6
                     what=f"the failure notice of job {job.pk}")
        transaction.on_commit(lambda job=job: signals.job_finished.send(Job, job=job))  # 7


def _run_again_for_newer_data(jobs, status, asked):
    """Step 1, before the slots are freed: a run again waits in its keys' line like any new
    job, and the freed slot then goes to the line's first in claim order. Only a job with a
    unique key can be asked for again while it runs; a cancel is the later word."""
    if status == JobStatus.CANCELLED:
        return
    for job in jobs:
        if asked is not None:
            _take_up_asked(job, status, asked.get(job.pk))
        elif job.unique_key:
            _take_up_asked(job, status, _asked_of(job))


def _asked_of(job):
    return Job.objects.filter(pk=job.pk).values_list("asked_fingerprint", "asked_payload").first()


def _decide_dependents(jobs, has_dependents):
    """Step 3: dependencies decide the waiting dependents (released, or to cancel); the
    cancels are transitions of their own, with their own pipeline. `has_dependents` unknown,
    the flag is read after the caller's UPDATE, which waited for any link being made."""
    if has_dependents is None:
        has_dependents = set(Job.objects.filter(pk__in=[job.pk for job in jobs],
                                                has_dependents=True).values_list("pk", flat=True))
    parents = [job.pk for job in jobs if job.pk in has_dependents]
    for dependent in dependencies.parents_ended(parents) if parents else ():
        cancel_dependent(dependent)


def _count(jobs, status, *, ran, now):
    """Step 4: the rollup's count; a run time only for an attempt that ran to its end (a
    cancel cuts one short). The engine's own bookkeeping, like the event noted with it: no
    savepoint of its own."""
    timed = ran and status != JobStatus.CANCELLED
    rollup.count([(job, _COUNTED[status], rollup.took_s(job, now) if timed else None)
                  for job in jobs], now=now)


def _kinds_hook(job):
    """Step 5: the kind's own record of the end (a domain row's state, say)."""
    finished = registry.policy(job.kind).finished
    if finished is not None:
        _guarded(finished, job, what=f"the {job.kind} kind's record of job {job.pk}'s end")


def _finished_in_memory(job, status, fields, now):
    """The job as the writer knows it after its final transition (what `job_finished` carries)."""
    job.status = status
    for name, value in fields.items():
        setattr(job, name, value)
    job.finished_at = job.finished_at or now


def _guarded(write, *args, what, **kwargs):
    """`write(...)` in a savepoint: if it fails, it is undone and logged, and the transition it
    rides on still commits (a worker never dies of an app's data, nor of its own bookkeeping)."""
    try:
        with transaction.atomic():
            write(*args, **kwargs)
    except Exception:  # noqa: BLE001
        log.exception("%s failed", what)


# --- Transitions out of RUNNING (jobs/engine/outcome.py chooses them) ------------------


def held(job, *, expired=False):
    """The job's row while this attempt holds it: RUNNING under its lease token.

    With `expired`, only once that lease has run out: the reaper's guard, which
    a worker renewing the lease in time defeats.
    """
    rows = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, lease_token=job.lease_token)
    return rows.filter(lease_expires_at__lt=queries.Come()) if expired else rows


_END_LEASE = {"worker": None, "lease_token": None, "lease_expires_at": None, "blocked_key": None,
              "stop_requested": ""}


def leave_running(job, outcome, *, status, expired=False, reason="", level=logging.INFO, exc=None,
                  data=None, retried=False, **fields):
    """RUNNING → `status` for this attempt's `outcome`: one guarded UPDATE; False if it matched nothing.

    In the same transaction: the job's slots are freed (and its queue rests),
    and the transition is noted. `fields` are the row's other changes;
    `retried` says the attempt failed and the job goes again (the rollup counts it).
    """
    with transaction.atomic():
        changed = held(job, expired=expired).update(status=status, **fields, **_END_LEASE)
        if changed:
            history.note(job, outcome, status=status, reason=reason, level=level, exc=exc,
                         **(data or {}))
            if status in FINISHED_STATUSES:
                _ended([(job, {"error": fields.get("error", job.error),
                               "error_code": fields.get("error_code", job.error_code),
                               "errors": fields.get("errors", job.errors)})], status, ran=True)
            else:  # READY or PAUSED: the job goes on, with newer data asked of it meanwhile
                _run_again_for_newer_data([job], status, None)
                limits.left_running([job])
                if status == JobStatus.READY:
                    if retried:
                        _guarded(rollup.count, [(job, "retried", None)], what="the rollup's count")
                    wakeup.notify(job.queue)
    return bool(changed)


def complete_many(jobs_results):
    """RUNNING → SUCCESSFUL for a batch of (job, result); returns the ids that stuck.

    The plain ones (see `_is_plain`) go first in one statement without a
    transaction around it; the rest, and any plain one that statement left
    (it has dependents, or lost its lease), in one transaction that frees
    their slots and decides their dependents.
    """
    if not jobs_results:
        return []
    done = _complete_plain([(job, result) for job, result in jobs_results if _is_plain(job)])
    rest = [(job, result) for job, result in jobs_results if job.pk not in done]
    return [*done, *_complete_in_transaction(rest)]


def _is_plain(job):
    """Whether ending `job` needs nothing but its own row, event and rollup count: PostgreSQL
    (one statement holds them all), no concurrency keys to free, no queue gap to rest, no
    `finished` hook of its kind. (A rate key needs nothing at the end; dependents are
    checked by the statement itself.)"""
    return (queries.is_postgres() and not job.concurrency_keys
            and registry.policy(job.kind).finished is None
            and not (limits.queue_settings(job.queue) or limits.NO_QUEUE).gap_seconds)


def _complete_plain(jobs_results):
    """`complete_many` for plain jobs: one statement, which is its own transaction, writes the
    row, the event and the rollup's count (steps 1-6 of the pipeline have nothing to do for a
    plain job); `job_finished` follows once it commits (step 7)."""
    if not jobs_results:
        return set()
    now = timezone.now()
    timings = {job.pk: rollup.timing(job, now) for job, _result in jobs_results}
    done = queries.complete_plain(
        [(job.pk, job.lease_token, result, *timings[job.pk]) for job, result in jobs_results],
        minute=rollup.minute_of(now), event_kind=str(Outcome.SUCCEEDED),
        event_data={"status": str(JobStatus.SUCCESSFUL)})
    finished = [(job, result) for job, result in jobs_results if job.pk in done]
    history.log_many([job for job, _result in finished], Outcome.SUCCEEDED,
                     status=JobStatus.SUCCESSFUL)
    for job, result in finished:
        _finished_in_memory(job, JobStatus.SUCCESSFUL, {"result": result}, now)
        transaction.on_commit(lambda job=job: signals.job_finished.send(Job, job=job))
    return done


def _complete_in_transaction(jobs_results):
    if not jobs_results:
        return []
    with transaction.atomic():
        done = queries.complete_batch([(job.pk, job.lease_token, result)
                                       for job, result in jobs_results])
        finished = [job for job, _result in jobs_results if job.pk in done]
        history.note_many(finished, Outcome.SUCCEEDED, status=JobStatus.SUCCESSFUL)
        _ended([(job, {"result": result}) for job, result in jobs_results if job.pk in done],
               JobStatus.SUCCESSFUL, ran=True, asked={pk: a for pk, (_flag, a) in done.items()},
               has_dependents={pk for pk, (flag, _asked) in done.items() if flag})
    return list(done)


def _take_up_asked(job, status, asked):
    """In the transaction that moved `job` out of RUNNING to `status`: what was asked of it
    while it ran (`asked`: the newer data's fingerprint, "" for none, and the payload a
    replace asked for, None for none) is not dropped.

    Going again (READY) or held (PAUSED), the job takes it as a job not yet running
    would have (READY: attempts from 0 for new data). Ended (SUCCESSFUL, FAILED), it is
    run again, once: a new job with its key, kind, priority, queue, keys and owner, the
    asked payload (its own if none) and the asked fingerprint (its own if none), queued
    before the kind's `finished` hook runs, so the hook can follow it. A CANCELLED job is
    not run again: the cancel is the later word. A new run that cannot be queued is
    logged; the transition it rides on still commits.
    """
    fingerprint, payload = asked or ("", None)
    if not fingerprint and payload is None:
        return
    cleared = {"asked_fingerprint": "", "asked_payload": None}
    if status in (JobStatus.READY, JobStatus.PAUSED):
        taken = _taken(job, status, fingerprint, payload)
        Job.objects.filter(pk=job.pk).update(**taken, **cleared)
        return
    Job.objects.filter(pk=job.pk).update(**cleared)
    _guarded(_above.run_again, job, fingerprint or job.fingerprint, payload,
             what=f"running job {job.pk} again for newer data")


def _taken(job, status, fingerprint, payload):
    """The row's changes of a job that goes on with what was asked of it (and `job` made so)."""
    taken = {}
    if fingerprint:
        taken["fingerprint"] = job.fingerprint = fingerprint
        if status == JobStatus.READY:
            taken["attempts"] = 0
    if payload is not None:
        taken["payload"] = job.payload = payload
    return taken


def error_entry(job, error, code, exc):
    """One entry of `Job.errors`: what an attempt that failed left behind (capped at MAX_ERRORS_KEPT)."""
    entry = {"attempt": job.attempts, "code": code, "message": error, "at": timezone.now().isoformat()}
    if exc is not None:
        entry["exception_class_path"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        entry["traceback"] = "".join(traceback.format_exception(exc))
    # The job in memory was read at claim time; errors only grow while a
    # worker holds the lease, so appending here loses nothing.
    return (list(job.errors or []) + [entry])[-MAX_ERRORS_KEPT:]


def note_read(job, fingerprint):
    """This attempt read data of `fingerprint` (under its lease): it becomes the job's, and
    newer data asked for meanwhile that turns out to be this very data is not run again."""
    return bool(held(job).update(fingerprint=fingerprint, asked_fingerprint=Case(
        When(asked_fingerprint=fingerprint, then=Value("")), default=F("asked_fingerprint"))))


def lock_lease(job):
    """Inside a transaction: lock `job`'s row if this attempt still holds its lease; False if not.

    The lock keeps a rescue (or any guarded transition) from taking the job
    until the caller's transaction ends, so a domain write made in it is made
    by the attempt that holds the lease or not at all. SQLite's IMMEDIATE
    transactions serialise writers, which gives the same there.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("lock_lease() only holds its lock inside transaction.atomic().")
    return bool(list(held(job).select_for_update().values_list("pk", flat=True)))


def report_progress(job, *, fraction=None, phase=None, message=None):
    """Write progress for a RUNNING job; False means the lease is gone and the handler must stop."""
    fields = {"progress_at": Now()}
    if fraction is not None:
        fields["progress"] = max(0.0, min(1.0, float(fraction)))
    if phase is not None:
        fields["phase"] = str(phase)[:100]
    if message is not None:
        fields["progress_message"] = str(message)[:500]
    return bool(held(job).update(**fields))


def renew_leases(worker, jobs):
    """Extend the leases of the jobs this worker still runs; returns the ids whose lease held."""
    if not jobs:
        return set()
    guard = Q()
    for job in jobs:
        guard |= Q(pk=job.pk, lease_token=job.lease_token)
    lease = timedelta(seconds=conf.JOBS_LEASE_SECONDS)
    ids = set(Job.objects.filter(guard, status=JobStatus.RUNNING, worker=worker)
              .values_list("pk", flat=True))
    Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING).update(lease_expires_at=Now() + lease)
    return ids


# --- Transitions out of READY by the engine -----------------------------------------


def leave_ready(job, status, event, *, reason, code, level=logging.INFO, actor=None):
    """READY (or PAUSED) → a final `status` before any attempt ran it; False if it had moved on."""
    changed = Job.objects.filter(pk=job.pk, status__in=[JobStatus.READY, JobStatus.PAUSED]).update(
        status=status, finished_at=Now(), error=str(reason), error_code=code, blocked_key=None)
    if changed:
        history.note(job, event, status=status, reason=reason, level=level, actor=actor, code=code)
        _ended([(job, {"error": str(reason), "error_code": code})], status, ran=False)
    return bool(changed)


def cancel_dependent(job, *, reason=None, code=dependencies.FAILED_PARENT):
    """A waiting dependent whose parent failed → CANCELLED (its own dependents follow)."""
    reason = reason or _("An earlier job it depends on failed or was cancelled.")
    return leave_ready(job, JobStatus.CANCELLED, Outcome.CANCELLED, reason=reason, code=code)


def fail_unserved(job, *, reason):
    """A READY job no live worker can run (its kind is served nowhere) → FAILED."""
    with transaction.atomic():
        return leave_ready(job, JobStatus.FAILED, Outcome.FAILED, reason=reason,
                            code="unknown_kind", level=logging.ERROR)


def fail_unreadable(jobs, *, code):
    """READY jobs whose row the engine cannot use (written by hand, say) → FAILED, never retried."""
    message = _("The job's stored data cannot be read, so it was failed instead of run.")
    for job in jobs:
        with transaction.atomic():
            leave_ready(job, JobStatus.FAILED, Outcome.FAILED, reason=message, code=code,
                         level=logging.ERROR)
