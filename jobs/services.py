"""Every change of a job's state, one function each: enqueue, the transitions, people's actions.

Each transition is a single guarded UPDATE: it names the states it may start
from and, for a RUNNING job, the lease token of the attempt that holds it. A
late or stale writer (a worker that lost its lease, a second click) matches no
row and changes nothing; the function reports that instead of resurrecting a
cancelled job or overwriting a rescued one. Each transition that happens
frees what the job held (jobs/limits.py) and is noted once (jobs/history.py),
in its own transaction.

How the end of an attempt picks its transition is jobs/outcome.py's rule;
workers, the watchdog and the reaper go through it, never straight here.
"""

import logging
import traceback
from datetime import timedelta
from types import SimpleNamespace

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.base import ModelState
from django.db.models.functions import Now
from django.db.models.signals import post_init, pre_init
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import (
    conf,
    dependencies,
    history,
    limits,
    notices,
    order,
    payloads,
    queries,
    registry,
    rollup,
    signals,
    wakeup,
)
from jobs.exceptions import IllegalTransition
from jobs.models import Action, Job, JobStatus, OnDependencyFailure, Outcome, Worker

log = logging.getLogger(__name__)

MAX_ERRORS_KEPT = 10  # per job: enough to see a pattern, bounded so a row stays small

# Staff's moves and priorities live with the claim order they change.
move_to_front, move_up, move_down = order.move_to_front, order.move_up, order.move_down
set_priority_tier = order.set_priority_tier
set_limit = limits.set_limit
set_rate = limits.set_rate


# --- Enqueue ---------------------------------------------------------------


_COLUMNS = Job._meta.concrete_fields
# A new Job's values, column by column: a constant default is read once here,
# not asked of its field for every job (some 25 calls an enqueue).
_NEW_JOB = {f.attname: None if f.has_default() and callable(f.default) else f.get_default()
            for f in _COLUMNS}
_MADE_PER_JOB = [(f.attname, f.default) for f in _COLUMNS if f.has_default() and callable(f.default)]


def build_job(kind, payload=None, **options):
    """A validated, unsaved Job; raises before anything is written.

    `limits` ({key: n}) gives keys that have no limit row yet their limit,
    instead of the kind's default; `rate_limit` ("10/m") gives the job's rate
    key, if it has no row yet, its rate.
    """
    spec = vars(resolve(kind, payload, **options))
    initial_limits, initial_rates = spec.pop("initial_limits"), spec.pop("initial_rates")
    payload_text = spec.pop("payload_text")
    owner = spec.pop("owner")
    fields = dict(_NEW_JOB)
    for name, make in _MADE_PER_JOB:
        if name not in spec:
            fields[name] = make()
    fields.update(spec)
    job = _new_job(fields)
    if owner is not None:
        job.owner = owner
    job.initial_limits, job.initial_rates = initial_limits, initial_rates
    job.payload_text = payload_text  # the payload's canonical JSON, as written
    return job


def _new_job(fields):
    """The Job that Job(**fields) makes, every column given, less its ~40 setattr() calls
    (a tenth of an enqueue's Python: docs/performance.md, tenth round); made by
    Job() itself when something listens to its pre_init or post_init signal."""
    # Most projects connect no receiver to either at all: that is seen without a lookup.
    if (pre_init.receivers or post_init.receivers) and (
            pre_init.has_listeners(Job) or post_init.has_listeners(Job)):
        return Job(**fields)
    job = Job.__new__(Job)
    job._state = ModelState()
    job.__dict__.update(fields)
    return job


def resolve(kind, payload=None, *, priority=None, queue=None, owner=None, run_after=None,
            unique_key=None, fingerprint=None, concurrency_keys=None, max_attempts=None,
            limits=None, rate_key=None, rate_limit=None,
            on_dependency_failure=OnDependencyFailure.CANCEL, _limits=None):
    """Validate a job and compute its policy-derived fields; nothing is written.

    `_limits` carries settings read once by a bulk caller (payload limits,
    default attempts), since reading settings costs more than the rest here.
    """
    policy = registry.get(kind).policy
    payload = {} if payload is None else payload
    text = payloads.validate(payload, **(_limits or {}).get("payload", {}))
    priority = policy.priority if priority is None else priority
    order.check_priority(priority)
    if unique_key is None and policy.unique_key:
        unique_key = policy.unique_key(payload, owner)
    if fingerprint is None:
        fingerprint = policy.fingerprint(payload, owner) if policy.fingerprint else ""
    if concurrency_keys is None:
        concurrency_keys = policy.concurrency_keys(payload, owner) if policy.concurrency_keys else []
    rate_limit = rate_limit or policy.rate()
    if rate_key is None:
        rate_key = policy.rate_key(payload, owner) if policy.rate_key else (
            kind if rate_limit else "")
    rate_key = str(rate_key or "")[:255]
    dependencies.check_on_failure(on_dependency_failure)
    now = timezone.now()
    # A namespace, not a model: bulk enqueue writes it as it is (its attributes are plain).
    return SimpleNamespace(
        kind=kind,
        queue=queue or policy.queue,
        payload=payload,
        payload_text=text,
        priority=priority,
        owner=owner,
        owner_id=owner.pk if owner is not None else None,
        unique_key=unique_key or None,
        fingerprint=fingerprint or "",
        concurrency_keys=sorted(set(concurrency_keys)),
        max_attempts=max_attempts or policy.max_attempts or (_limits or {}).get("attempts")
        or policy.attempts_allowed(),
        run_after=max(run_after, now) if run_after else now,
        enqueued_at=now,
        initial_limits=limits or {},
        rate_key=rate_key,
        initial_rates={rate_key: rate_limit} if rate_key and rate_limit else {},
        on_dependency_failure=on_dependency_failure,
        blocked_key=None,
    )


def enqueue(kind, payload=None, *, supersede=False, depends_on=None, replace=(), **options):
    """Queue one job and return it (or the live/finished job it merges into).

    - unique key: at most one live job per key; enqueueing again returns it,
      promoted when asked at a higher priority (never demoted);
    - fingerprint: a finished job with the same key and fingerprint is
      returned as it is; a new fingerprint queues a new run, attempts from 0.
      A FAILED one of a kind with a cool-down is returned while it cools
      down and re-armed (READY, attempts from 0) when asked for after it.
      A live job not yet running takes a new fingerprint (a READY one with its
      attempts reset); a RUNNING one keeps its own and notes the new one, and
      runs again for it when it ends (`_take_up_asked`);
    - replace: with a unique key, ("payload", "run_after") or either makes a
      READY job holding it take this call's (debounce: the last of a burst wins);
    - depends_on: jobs (or task results, ids) that must all be SUCCESSFUL
      before this one starts (jobs/dependencies.py); `on_dependency_failure`
      ("cancel" or "run") says what a failed one does to it. Only a new job
      is linked: one merged into a live job keeps that job's parents;
    - transactional: inside `transaction.atomic()` the job exists only if that commits.
    """
    replace = tuple(replace or ())
    if set(replace) - set(queries.REPLACEABLE):
        raise ValueError(_("replace takes “payload” and “run_after”, not %(v)r.") % {"v": replace})
    job = build_job(kind, payload, **options)
    if replace and job.unique_key is None:
        raise ValueError(_("replace needs a unique key: it changes the job holding that key."))
    parents = dependencies.parent_ids(depends_on) if depends_on else []
    limits.ensure([job])
    if job.concurrency_keys or job.rate_key or parents or registry.followers(kind):
        # The key locks taken to decide parking, and the parents' locks, are
        # held until the insert (and its links) commit.
        with transaction.atomic():
            return _enqueue_one(job, supersede, replace=replace, parents=parents)
    return _enqueue_one(job, supersede, replace=replace, parents=parents)


def _enqueue_one(job, supersede, *, replace=(), parents=()):
    may_run = True
    if parents:
        may_run = dependencies.park_if_waiting(job, dependencies.lock_parents(parents))
    if job.blocked_key is None:
        limits.park_at_enqueue([job])
    if job.unique_key is None:
        # One statement writes the row and (PostgreSQL) its queue's NOTIFY.
        job.pk = queries.insert_job(job, notify_channel=wakeup.JOBS_CHANNEL)
        job._state.adding = False
        return _inserted(job, parents, may_run, notified=True)
    if supersede:
        _supersede(job)
    cooldown_s = registry.policy(job.kind).cooldown_s
    if job.fingerprint or cooldown_s:
        latest = Job.objects.filter(unique_key=job.unique_key).order_by("-id").first()
        if latest and latest.is_finished and latest.fingerprint == job.fingerprint:
            if latest.status == JobStatus.FAILED and cooldown_s:
                return _rearm_on_demand(latest, job, cooldown_s)
            if job.fingerprint:
                return latest
    job_id, inserted = queries.insert_or_promote(job, replace)
    if inserted:
        job.pk = job_id
        return _inserted(job, parents, may_run)
    return Job.objects.get(pk=job_id)


def _inserted(job, parents, may_run, *, notified=False):
    """A new job's row exists: link it to its parents, queue its followers, wake workers
    (`notified`: the INSERT itself carried PostgreSQL's NOTIFY)."""
    if parents:
        dependencies.link(job, parents)
        if not may_run:  # a parent had already failed
            cancel_dependent(job, reason=_("An earlier job it depends on failed or was cancelled."),
                             code=dependencies.FAILED_PARENT)
            return Job.objects.get(pk=job.pk)
    dependencies.follow_ups(job)
    wakeup.notify(job.queue, sent=notified)
    return job


# A finished job run again from the start (a staff retry, a re-arm after the
# cool-down): what its last attempts left on the row is cleared.
_FRESH_START = dict(status=JobStatus.READY, attempts=0, snoozes=0, finished_at=None, error="",
                    error_code="", progress=None, phase="", progress_message="")


def _rearm_on_demand(failed, asked, cooldown_s):
    """A given-up job asked for again: itself while it cools down, READY again (attempts 0) after.

    Only a request re-arms it, never a sweep: a permanent failure nobody asks
    about stays FAILED (and is pruned with the rest of the history), instead
    of being re-run every cool-down for ever. The guarded UPDATE lets one of
    two racing requests re-arm it; the other gets the row as that one left it.
    """
    if failed.finished_at and failed.finished_at > timezone.now() - timedelta(seconds=cooldown_s):
        return failed
    try:
        with transaction.atomic():
            if Job.objects.filter(pk=failed.pk, status=JobStatus.FAILED).update(
                run_after=asked.run_after, priority=max(failed.priority, asked.priority),
                **_FRESH_START,
            ):
                failed.attempts = 0
                history.note(failed, Action.REARMED, status=JobStatus.READY,
                             reason=_("Asked for again after its cool-down."), cooldown_s=cooldown_s)
                _notify(failed.queue)
    except IntegrityError:
        pass  # a newer live job holds the key meanwhile: that one is the answer
    return (Job.objects.filter(unique_key=failed.unique_key).order_by("-id").first()
            or Job.objects.get(pk=failed.pk))


def enqueue_many(specs):
    """Queue many jobs in one statement; `specs` are (kind, payload, options) tuples.

    Returns how many were queued. No model objects are built: at tens of
    thousands of jobs a second their construction would cost more than the
    insert. Unique jobs need the per-key upsert; send those through `enqueue()`.
    """
    read_once = {
        "payload": {"max_depth": conf.JOBS_MAX_PAYLOAD_DEPTH, "max_bytes": conf.JOBS_MAX_PAYLOAD_BYTES},
        "attempts": conf.JOBS_DEFAULT_MAX_ATTEMPTS,
    }
    jobs = [resolve(kind, payload, **options, _limits=read_once) for kind, payload, options in specs]
    if any(job.unique_key for job in jobs):
        raise ValueError(_("Bulk enqueue takes jobs without a unique key; use enqueue() for those."))
    limits.ensure(jobs)
    with transaction.atomic():
        limits.park_at_enqueue(jobs)
        queries.insert_many(jobs)
        for queue in {job.queue for job in jobs}:
            _notify(queue)
    return len(jobs)


def _supersede(job):
    """Cancel READY jobs of the same kind and owner that are for another subject."""
    stale = Job.objects.filter(kind=job.kind, owner=job.owner, status=JobStatus.READY).exclude(
        unique_key=job.unique_key
    )
    message = _("Superseded by a newer request.")
    for stale_job in stale.select_for_update():
        _leave_ready(stale_job, JobStatus.CANCELLED, Outcome.CANCELLED, reason=message,
                     code="superseded")


def _notify(queue):
    """Wake idle workers of `queue` (PostgreSQL delivers the notification at commit)."""
    wakeup.notify(queue)



# How the rollup counts each final state (jobs/rollup.py).
_COUNTED = {JobStatus.SUCCESSFUL: "succeeded", JobStatus.FAILED: "failed",
            JobStatus.CANCELLED: "cancelled"}


def _finished(entries, status, *, ran, has_dependents=None):
    """In the transaction that gave jobs their final `status`: their dependents decided, the
    rollup's count of them, the kind's own record of each, a failure notice, then the
    `job_finished` signal once that transaction commits.

    `entries` are (job, the row's new values); `ran` when they left RUNNING
    (so their attempt's run time is a duration worth charting). `has_dependents`
    holds the ids whose row was flagged when the caller's UPDATE returned the flag;
    read otherwise, after that UPDATE, which waited for any link being made meanwhile.
    """
    if not entries:
        return
    if has_dependents is None:
        has_dependents = set(Job.objects.filter(pk__in=[job.pk for job, _fields in entries],
                                                has_dependents=True).values_list("pk", flat=True))
    parents = [job.pk for job, _fields in entries if job.pk in has_dependents]
    if parents:
        dependencies.parents_ended(parents)
    now = timezone.now()
    for job, fields in entries:
        _finished_in_memory(job, status, fields, now)
    timed = ran and status != JobStatus.CANCELLED  # a cancel cuts an attempt short
    # The engine's own bookkeeping, like the event noted with it: no savepoint of its own.
    rollup.count([(job, _COUNTED[status], rollup.took_s(job, now) if timed else None)
                  for job, _fields in entries], now=now)
    for job, _fields in entries:
        finished = registry.policy(job.kind).finished
        if finished is not None:
            _guarded(finished, job, what=f"the {job.kind} kind's record of job {job.pk}'s end")
        if status == JobStatus.FAILED:
            _guarded(notices.job_failed, job, what=f"the failure notice of job {job.pk}")
        transaction.on_commit(lambda job=job: signals.job_finished.send(Job, job=job))


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


# --- Transitions out of RUNNING (jobs/outcome.py chooses them) ------------------


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
            if job.unique_key and status != JobStatus.CANCELLED:
                # Only a job with a unique key can be asked for again while it runs. Before
                # the slots are freed: a run again waits in its keys' line like any new job,
                # and the freed slot then goes to the line's first in claim order.
                _take_up_asked(job, status, Job.objects.filter(pk=job.pk).values_list(
                    "asked_fingerprint", flat=True).first())
            limits.left_running([job])
            if status == JobStatus.READY:
                if retried:
                    _guarded(rollup.count, [(job, "retried", None)], what="the rollup's count")
                _notify(job.queue)
            elif status != JobStatus.PAUSED:
                _finished([(job, {"error": fields.get("error", job.error),
                                  "error_code": fields.get("error_code", job.error_code),
                                  "errors": fields.get("errors", job.errors)})], status, ran=True)
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
    """`complete_many` for plain jobs: one statement, which is its own transaction."""
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
        for job in finished:  # before the slots are freed, as in leave_running
            _take_up_asked(job, JobStatus.SUCCESSFUL, done[job.pk][1])
        limits.left_running(finished)
        _finished([(job, {"result": result}) for job, result in jobs_results if job.pk in done],
                  JobStatus.SUCCESSFUL, ran=True,
                  has_dependents={pk for pk, (flag, _asked) in done.items() if flag})
    return list(done)


def _take_up_asked(job, status, asked):
    """In the transaction that moved `job` out of RUNNING to `status`: newer data asked of it
    while it ran (`asked`, its fingerprint) is not dropped.

    Going again (READY) or held (PAUSED), the job takes it as a job not yet running
    would have (READY: attempts from 0). Ended (SUCCESSFUL, FAILED), it is run again:
    a new job with its key, kind, payload, priority, queue, keys and owner, for the
    asked fingerprint, queued before the kind's `finished` hook runs, so the hook can
    follow it. A CANCELLED job is not run again: the cancel is the later word. A new run
    that cannot be queued is logged; the transition it rides on still commits.
    """
    if not asked:
        return
    if status in (JobStatus.READY, JobStatus.PAUSED):
        fresh = {"attempts": 0} if status == JobStatus.READY else {}
        Job.objects.filter(pk=job.pk).update(fingerprint=asked, asked_fingerprint="", **fresh)
        job.fingerprint = asked
        return
    Job.objects.filter(pk=job.pk).update(asked_fingerprint="")
    _guarded(_run_again, job, asked, what=f"running job {job.pk} again for newer data")


def _run_again(job, fingerprint):
    again = enqueue(job.kind, job.payload, owner=job.owner, priority=job.priority, queue=job.queue,
                    unique_key=job.unique_key, fingerprint=fingerprint,
                    concurrency_keys=job.concurrency_keys, rate_key=job.rate_key,
                    max_attempts=job.max_attempts, on_dependency_failure=job.on_dependency_failure)
    history.note(job, Action.RUN_AGAIN, reason=_("Newer data was asked for while it ran."),
                 run=again.pk)


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


def _leave_ready(job, status, event, *, reason, code, level=logging.INFO, actor=None):
    """READY (or PAUSED) → a final `status` before any attempt ran it; False if it had moved on."""
    changed = Job.objects.filter(pk=job.pk, status__in=[JobStatus.READY, JobStatus.PAUSED]).update(
        status=status, finished_at=Now(), error=str(reason), error_code=code, blocked_key=None)
    if changed:
        history.note(job, event, status=status, reason=reason, level=level, actor=actor, code=code)
        _finished([(job, {"error": str(reason), "error_code": code})], status, ran=False)
    return bool(changed)


def cancel_dependent(job, *, reason, code):
    """A waiting dependent whose parent failed → CANCELLED (its own dependents follow)."""
    return _leave_ready(job, JobStatus.CANCELLED, Outcome.CANCELLED, reason=reason, code=code)


def fail_unserved(job, *, reason):
    """A READY job no live worker can run (its kind is served nowhere) → FAILED."""
    with transaction.atomic():
        return _leave_ready(job, JobStatus.FAILED, Outcome.FAILED, reason=reason,
                            code="unknown_kind", level=logging.ERROR)


def fail_unreadable(jobs, *, code):
    """READY jobs whose row the engine cannot use (written by hand, say) → FAILED, never retried."""
    message = _("The job's stored data cannot be read, so it was failed instead of run.")
    for job in jobs:
        with transaction.atomic():
            _leave_ready(job, JobStatus.FAILED, Outcome.FAILED, reason=message, code=code,
                         level=logging.ERROR)


# --- Actions of people (users, staff, the API) -----------------------------


def cancel(job, *, actor=None, reason=""):
    """READY/PAUSED → CANCELLED at once; RUNNING → asks its worker to stop (it then records CANCELLED)."""
    with transaction.atomic():
        if not _leave_ready(job, JobStatus.CANCELLED, Outcome.CANCELLED, reason=reason,
                            code="cancelled", actor=actor):
            if not Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
                stop_requested=Outcome.CANCELLED
            ):
                raise IllegalTransition(_("Only a queued, running or paused job can be cancelled."))
            history.note(job, Action.CANCEL_REQUESTED, actor=actor, reason=reason)
    wakeup.notify_stop(job.pk)


def pause(job, *, actor=None, reason=""):
    """READY → PAUSED at once; RUNNING → asks its worker to stop (it then records PAUSED)."""
    with transaction.atomic():
        if Job.objects.filter(pk=job.pk, status=JobStatus.READY).update(
            status=JobStatus.PAUSED, blocked_key=None
        ):
            history.note(job, Outcome.PAUSED, status=JobStatus.PAUSED, actor=actor, reason=reason)
        elif Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            stop_requested=Outcome.PAUSED
        ):
            history.note(job, Action.PAUSE_REQUESTED, actor=actor, reason=reason)
        else:
            raise IllegalTransition(_("Only a queued or running job can be paused."))
    wakeup.notify_stop(job.pk)


def resume(job, *, actor=None, reason=""):
    """PAUSED → READY, keeping its attempts."""
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, status=JobStatus.PAUSED).update(
            status=JobStatus.READY, run_after=Now(), error_code="", error=""
        ):
            raise IllegalTransition(_("Only a paused job can be resumed."))
        dependencies.hold_if_waiting(job)
        history.note(job, Action.RESUMED, status=JobStatus.READY, actor=actor, reason=reason)
    _notify(job.queue)


def retry(job, *, actor=None, reason=""):
    """FAILED/CANCELLED → READY with attempts reset (a person asked for another go)."""
    try:
        with transaction.atomic():
            if not Job.objects.filter(
                pk=job.pk, status__in=[JobStatus.FAILED, JobStatus.CANCELLED]
            ).update(run_after=Now(), **_FRESH_START):
                raise IllegalTransition(_("Only a failed or cancelled job can be retried."))
            job.attempts = 0
            dependencies.hold_if_waiting(job)
            history.note(job, Action.RETRIED, status=JobStatus.READY, actor=actor, reason=reason)
            _notify(job.queue)
    except IntegrityError:
        raise IllegalTransition(_("Another job for the same thing is already queued or running.")) from None


def retry_matching(queryset, *, actor=None, reason="", batch_size=500):
    """Retry every FAILED job of `queryset`, one `retry()` each; returns (retried, skipped)."""
    return _each_matching(queryset, [JobStatus.FAILED], retry, actor=actor, reason=reason,
                          batch_size=batch_size)


def cancel_matching(queryset, *, actor=None, reason="", batch_size=500):
    """Cancel every live job of `queryset`, one `cancel()` each; returns (cancelled, skipped).

    Running jobs are asked to stop, as `cancel()` does for one.
    """
    return _each_matching(queryset, [JobStatus.READY, JobStatus.PAUSED, JobStatus.RUNNING], cancel,
                          actor=actor, reason=reason, batch_size=batch_size)


def _each_matching(queryset, statuses, service, *, actor, reason, batch_size):
    """`service(job)` for every job of `queryset` in `statuses`; (done, skipped).

    Walks the ids in primary-key batches, so a filter that matches millions of
    jobs never loads them at once or holds one long transaction; a job whose
    state changed meanwhile is skipped.
    """
    done = skipped = 0
    matching = queryset.filter(status__in=statuses).select_related(None).order_by("pk")
    last = 0
    while batch := list(matching.filter(pk__gt=last)[:batch_size]):
        for job in batch:
            try:
                service(job, actor=actor, reason=reason)
                done += 1
            except IllegalTransition:
                skipped += 1
        last = batch[-1].pk
    return done, skipped


def command_worker(worker, command, *, actor=None):
    """Tell a live worker to stop claiming ("quiet") or to shut down gracefully ("stop").

    The worker reads its command at its next heartbeat (JOBS_HEARTBEAT_SECONDS).
    """
    if command not in (Worker.Command.QUIET, Worker.Command.STOP):
        raise ValueError(_("A worker can be told to quiet or to stop, nothing else."))
    if not Worker.objects.filter(pk=worker.pk, stopped_at__isnull=True).update(command=command):
        raise IllegalTransition(_("That worker has already stopped."))
    log.info("worker %s told to %s by %s", worker.name, command, actor or "nobody")


def set_queue(name, **changes):
    """Change a queue's live settings (paused, concurrency, gap_seconds) for the whole fleet."""
    limits.set_queue(name, **changes)
    _notify(name)


__all__ = [
    "build_job", "enqueue", "enqueue_many", "resolve",
    "held", "leave_running", "complete_many", "error_entry", "lock_lease", "report_progress",
    "renew_leases", "fail_unserved", "fail_unreadable",
    "cancel", "cancel_matching", "pause", "resume", "retry", "retry_matching", "move_to_front",
    "move_up", "move_down", "set_priority_tier", "set_limit", "set_rate", "set_queue",
    "command_worker", "cancel_dependent",
]
