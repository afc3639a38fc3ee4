"""Enqueue: resolve a kind's policy, build the row, insert it or merge it into a live job.

Everything is checked before anything is written (the payload, the priority,
the dependency rule). A unique key admits one live job: asking again returns
it, promoted or given newer data; a given-up job with a cool-down is re-armed
on demand. Parking at enqueue (concurrency keys, rates, parents) decides
whether a new job may be claimed at once. Enqueueing can end other jobs (a
superseded request, a dependent of a parent that already failed): those go
through the transitions, like every change of state.
"""

from datetime import timedelta
from types import SimpleNamespace

from django.db import IntegrityError, transaction
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import conf
from jobs.engine import (
    dbwait,
    dependencies,
    history,
    limits,
    order,
    payloads,
    queries,
    registry,
    transitions,
    wakeup,
)
from jobs.models import Action, Job, JobStatus, OnDependencyFailure, Outcome

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


@dbwait.spinning
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
      runs again for it when it ends (jobs/engine/transitions.py, step 1 of the
      pipeline after a job ends);
    - replace: with a unique key, ("payload", "run_after") or either makes a
      READY job holding it take this call's (debounce: the last of a burst wins).
      A RUNNING one notes a replaced payload and runs once more with it when it
      ends (the last asked, however many); a run_after alone asks it nothing;
    - depends_on: jobs (or task results, ids) that must all be SUCCESSFUL
      before this one starts (jobs/engine/dependencies.py); `on_dependency_failure`
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


def _enqueue_one(job, supersede, *, replace=(), parents=(), again=False):
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
    if (job.fingerprint or cooldown_s) and not again:
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
            transitions.cancel_dependent(job)
            return Job.objects.get(pk=job.pk)
    for kind, payload, options in dependencies.follow_ups(job):
        enqueue(kind, payload, **options)
    wakeup.notify(job.queue, sent=notified)
    return job


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
                **transitions.FRESH_START,
            ):
                failed.attempts = 0
                history.note(failed, Action.REARMED, status=JobStatus.READY,
                             reason=_("Asked for again after its cool-down."), cooldown_s=cooldown_s)
                wakeup.notify(failed.queue)
    except IntegrityError:
        pass  # a newer live job holds the key meanwhile: that one is the answer
    return (Job.objects.filter(unique_key=failed.unique_key).order_by("-id").first()
            or Job.objects.get(pk=failed.pk))


@dbwait.spinning
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
            wakeup.notify(queue)
    return len(jobs)


def _supersede(job):
    """Cancel READY jobs of the same kind and owner that are for another subject."""
    stale = Job.objects.filter(kind=job.kind, owner=job.owner, status=JobStatus.READY).exclude(
        unique_key=job.unique_key
    )
    message = _("Superseded by a newer request.")
    for stale_job in stale.select_for_update():
        transitions.leave_ready(stale_job, JobStatus.CANCELLED, Outcome.CANCELLED,
                                reason=message, code="superseded")




def run_again(job, fingerprint, payload=None):
    """Queue `job` again for what was asked of it while it ran (the after-end pipeline's
    first step, jobs/engine/transitions.py): the same key, kind and policy, for
    `fingerprint`, with `payload` (a replace's; None: the job's own)."""
    again = build_job(job.kind, job.payload if payload is None else payload, owner=job.owner,
                      priority=job.priority, queue=job.queue, unique_key=job.unique_key,
                      fingerprint=fingerprint, concurrency_keys=job.concurrency_keys,
                      rate_key=job.rate_key, max_attempts=job.max_attempts,
                      on_dependency_failure=job.on_dependency_failure)
    limits.ensure([again])
    # Already in the transaction that ended `job`. A run asked while the key's last job ran
    # is new whatever its fingerprint: that finished job is never the answer.
    again = _enqueue_one(again, False, again=True)
    history.note(job, Action.RUN_AGAIN, reason=_("Newer data was asked for while it ran."),
                 run=again.pk)
