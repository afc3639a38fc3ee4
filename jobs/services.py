"""Every change of a job's state, one function each.

Each transition is a single guarded UPDATE: it names the states it may start
from and, for a RUNNING job, the lease token of the worker that holds it. A
late or stale writer (a worker that lost its lease, a second click) matches no
row and changes nothing; the function reports that instead of resurrecting a
cancelled job or overwriting a rescued one.
"""

import logging
import traceback
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import conf, payloads, registry, signals, sql
from jobs.exceptions import IllegalTransition, InvalidPriority, snooze_seconds
from jobs.models import (
    CLAIM_ORDER,
    FINISHED_STATUSES,
    LIVE_STATUSES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    ConcurrencyLimit,
    Job,
    JobEvent,
    JobStatus,
)

log = logging.getLogger(__name__)

MAX_ERRORS_KEPT = 10  # per job: enough to see a pattern, bounded so a row stays small
UNPARK_BATCH = 1000


# --- Enqueue ---------------------------------------------------------------


def _check_priority(priority):
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
        PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise InvalidPriority(
            _("Priority must be a whole number from %(min)d to %(max)d, not %(value)r.")
            % {"min": PRIORITY_MIN, "max": PRIORITY_MAX, "value": priority}
        )


def build_job(kind, payload=None, **options):
    """A validated, unsaved Job; raises before anything is written.

    `limits` ({key: n}) gives keys that have no limit row yet their limit,
    instead of the kind's default.
    """
    spec = _resolve(kind, payload, **options)
    limits = spec.pop("initial_limits")
    spec.pop("payload_text")
    job = Job(**spec)
    job.initial_limits = limits
    return job


class _Spec(dict):
    """A resolved job as plain values: what bulk enqueue writes without building models."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value


def _resolve(kind, payload=None, *, priority=None, queue=None, owner=None, run_after=None,
             unique_key=None, fingerprint=None, concurrency_keys=None, max_attempts=None,
             limits=None, _limits=None):
    """Validate a job and compute its policy-derived fields; nothing is written.

    `_limits` carries settings read once by a bulk caller (payload limits,
    default attempts), since reading settings costs more than the rest here.
    """
    policy = registry.get(kind).policy
    payload = {} if payload is None else payload
    text = payloads.validate(payload, **(_limits or {}).get("payload", {}))
    priority = policy.priority if priority is None else priority
    _check_priority(priority)
    if unique_key is None and policy.unique_key:
        unique_key = policy.unique_key(payload, owner)
    if fingerprint is None:
        fingerprint = policy.fingerprint(payload, owner) if policy.fingerprint else ""
    if concurrency_keys is None:
        concurrency_keys = policy.concurrency_keys(payload, owner) if policy.concurrency_keys else []
    now = timezone.now()
    return _Spec(
        kind=kind,
        queue=queue or policy.queue,
        payload=payload,
        payload_text=text,
        priority=priority,
        owner=owner,
        unique_key=unique_key or None,
        fingerprint=fingerprint or "",
        concurrency_keys=sorted(set(concurrency_keys)),
        max_attempts=max_attempts or policy.max_attempts or (_limits or {}).get("attempts")
        or policy.attempts_allowed(),
        run_after=max(run_after, now) if run_after else now,
        enqueued_at=now,
        initial_limits=limits or {},
        blocked_key=None,
    )


def _ensure_limits(jobs):
    """Give every concurrency key a limit row (the kind's default) so the claim can lock it."""
    rows = {}
    for job in jobs:
        policy = registry.get(job.kind).policy
        for key in job.concurrency_keys:
            limit = job.initial_limits.get(key) or policy.limit_for(key)
            rows.setdefault(key, ConcurrencyLimit(key=key, limit=limit))
    if rows:
        ConcurrencyLimit.objects.bulk_create(rows.values(), ignore_conflicts=True)


def enqueue(kind, payload=None, *, supersede=False, **options):
    """Queue one job and return it (or the live/finished job it merges into).

    - unique key: at most one live job per key; enqueueing again returns it,
      promoted when asked at a higher priority (never demoted);
    - fingerprint: a finished job with the same key and fingerprint is
      returned as it is; a new fingerprint queues a new run, attempts from 0.
      A FAILED one of a kind with a cool-down is returned while it cools
      down and re-armed (READY, attempts from 0) when asked for after it;
      A live job not yet running takes a new fingerprint (a READY one with its
      attempts reset); a RUNNING one keeps its own, so a request after it ends
      queues a run on the new data;
    - supersede: READY jobs of this kind and owner for other keys are cancelled;
    - transactional: inside `transaction.atomic()` the job exists only if that commits.
    """
    job = build_job(kind, payload, **options)
    _ensure_limits([job])
    if job.concurrency_keys:
        # The key locks taken to decide parking are held until the insert commits.
        with transaction.atomic():
            return _enqueue_one(job, supersede)
    return _enqueue_one(job, supersede)


def _enqueue_one(job, supersede):
    _park_behind_full_keys([job])
    if job.unique_key is None:
        job.save(force_insert=True)
        _notify(job.queue)
        return job
    if supersede:
        _supersede(job)
    cooldown_s = _policy(job.kind).cooldown_s
    if job.fingerprint or cooldown_s:
        latest = Job.objects.filter(unique_key=job.unique_key).order_by("-id").first()
        if latest and latest.is_finished and latest.fingerprint == job.fingerprint:
            if latest.status == JobStatus.FAILED and cooldown_s:
                return _rearm_on_demand(latest, job, cooldown_s)
            if job.fingerprint:
                return latest
    job_id, inserted = _insert_or_promote(job)
    if inserted:
        _notify(job.queue)
        job.pk = job_id
        return job
    return Job.objects.get(pk=job_id)


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
                JobEvent.objects.create(job_id=failed.pk, kind=JobEvent.Kind.REARMED,
                                        reason=_("Asked for again after its cool-down."),
                                        data={"cooldown_s": cooldown_s})
                _notify(failed.queue)
    except IntegrityError:
        pass  # a newer live job holds the key meanwhile: that one is the answer
    return (Job.objects.filter(unique_key=failed.unique_key).order_by("-id").first()
            or Job.objects.get(pk=failed.pk))


def _insert_or_promote(job):
    """INSERT the job, or update the live job holding its key (priority, fingerprint), in one statement.

    The partial unique index arbitrates between two enqueuers racing on one
    key: exactly one row is inserted and the other caller gets that row. A
    read-then-write would let both insert (or both miss) under concurrency.
    """
    fields = [f for f in Job._meta.concrete_fields if not f.primary_key]
    job.updated_at = timezone.now()
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = [f.get_db_prep_save(getattr(job, f.attname), connection) for f in fields]
    marks = ", ".join(["%s"] * len(fields))
    live = ", ".join(f"'{s}'" for s in LIVE_STATUSES)
    # New data (another fingerprint) for a job not yet running: it will read
    # that data when it runs, so it takes the fingerprint, and a READY one
    # starts its attempts again (they were spent on the old data). A RUNNING
    # job keeps its own: its attempt read the old data, and a request after it
    # ends must still see a stale fingerprint to queue a fresh run. SET reads
    # the row as it was, so every CASE sees the old fingerprint.
    new_data = ("excluded.fingerprint <> '' AND excluded.fingerprint <> jobs_job.fingerprint "
                "AND jobs_job.status <> 'RUNNING'")
    statement = (
        f"INSERT INTO jobs_job ({columns}) VALUES ({marks}) "
        f"ON CONFLICT (unique_key) WHERE status IN ({live}) DO UPDATE SET "
        "priority = CASE WHEN excluded.priority > jobs_job.priority "
        "THEN excluded.priority ELSE jobs_job.priority END, "
        f"attempts = CASE WHEN {new_data} AND jobs_job.status = 'READY' "
        "THEN 0 ELSE jobs_job.attempts END, "
        f"fingerprint = CASE WHEN {new_data} THEN excluded.fingerprint "
        "ELSE jobs_job.fingerprint END "
        "RETURNING id, public_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, values)
        job_id, public_id = cursor.fetchone()
    return job_id, str(public_id).replace("-", "") == job.public_id.hex


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
    jobs = [_resolve(kind, payload, **options, _limits=read_once) for kind, payload, options in specs]
    if any(job.unique_key for job in jobs):
        raise ValueError(_("Bulk enqueue takes jobs without a unique key; use enqueue() for those."))
    _ensure_limits(jobs)
    with transaction.atomic():
        _park_behind_full_keys(jobs)
        sql.insert_many(jobs)
        for queue in {job.queue for job in jobs}:
            _notify(queue)
    return len(jobs)


def _park_behind_full_keys(jobs):
    """Enqueue jobs whose key is already full (or has a waiting line) parked.

    A user who queues 100,000 jobs at a limit of 1 then never puts them in the
    claim index at all: they wait in the key's line and are unparked one per
    freed slot. The key's limit row is locked first (as `release_keys` does),
    so a slot freed meanwhile cannot miss a job parked here.
    """
    keys = {key for job in jobs for key in job.concurrency_keys}
    if not keys:
        return
    limits = sql.lock_limits(keys)
    running = sql.running_counts(list(keys))
    in_line = set(
        Job.objects.filter(status=JobStatus.READY, blocked_key__in=list(keys))
        .values_list("blocked_key", flat=True)
        .order_by()
        .distinct()
    ) if len(keys) <= 50 else set()
    room = {key: limits[key] - running.get(key, 0) for key in limits}
    for job in jobs:
        full = next((k for k in job.concurrency_keys if k in in_line or room.get(k, 1) <= 0), None)
        if full is not None:
            job.blocked_key = full
            in_line.add(full)  # keep the line's order: later jobs of this key wait behind
            continue
        for key in job.concurrency_keys:
            room[key] = room.get(key, 1) - 1


def _supersede(job):
    """Cancel READY jobs of the same kind and owner that are for another subject."""
    stale = Job.objects.filter(kind=job.kind, owner=job.owner, status=JobStatus.READY).exclude(
        unique_key=job.unique_key
    )
    message = _("Superseded by a newer request.")
    for stale_job in stale.select_for_update():
        if Job.objects.filter(pk=stale_job.pk, status=JobStatus.READY).update(
            status=JobStatus.CANCELLED, error=message, error_code="superseded",
            finished_at=Now(), blocked_key=None,
        ):
            _finished(stale_job, JobStatus.CANCELLED, error=message, error_code="superseded")


def _notify(queue):
    """Wake idle workers of `queue` (PostgreSQL delivers the notification at commit)."""
    from jobs import wakeup

    wakeup.notify(queue)


def _finished(job, status, **fields):
    """Announce a final state once the transaction that wrote it commits."""
    job.status = status
    for name, value in fields.items():
        setattr(job, name, value)
    job.finished_at = job.finished_at or timezone.now()
    transaction.on_commit(lambda: signals.job_finished.send(Job, job=job))


# --- Worker-side transitions (guarded by the lease token) ------------------


def _running(job_id, token):
    return Job.objects.filter(pk=job_id, status=JobStatus.RUNNING, lease_token=token)


def _end_lease():
    return {"worker": None, "lease_token": None, "lease_expires_at": None, "blocked_key": None,
            "stop_requested": ""}


def complete(job, result=None):
    """RUNNING → SUCCESSFUL. False when the lease was lost meanwhile (nothing written)."""
    with transaction.atomic():
        changed = _running(job.pk, job.lease_token).update(
            status=JobStatus.SUCCESSFUL,
            result=result,
            progress=1.0,
            finished_at=Now(),
            error="",
            error_code="",
            **_end_lease(),
        )
        if changed:
            release_keys(job.concurrency_keys)
            _finished(job, JobStatus.SUCCESSFUL, result=result)
    return bool(changed)


def complete_many(jobs_results):
    """Complete a batch of (job, result) in one statement; returns the ids that stuck."""
    if not jobs_results:
        return []
    with transaction.atomic():
        done = set(sql.complete_batch([(job.pk, job.lease_token, result) for job, result in jobs_results]))
        release_keys([k for job, _ in jobs_results if job.pk in done for k in job.concurrency_keys])
        for job, result in jobs_results:
            if job.pk in done:
                _finished(job, JobStatus.SUCCESSFUL, result=result)
    return list(done)


def fail(job, *, error, code="error", exc=None, retry=True, delay_s=None):
    """RUNNING → READY later (a retry) or FAILED when attempts are spent or `retry` is off."""
    spec_policy = _policy(job.kind)
    error = str(error)  # a lazy translation must not reach the JSON column
    entry = _error_entry(job, error, code, exc)
    will_retry = retry and job.attempts < job.max_attempts
    with transaction.atomic():
        if will_retry:
            delay = spec_policy.backoff_s(job.attempts) if delay_s is None else delay_s
            changed = _running(job.pk, job.lease_token).update(
                status=JobStatus.READY,
                run_after=Now() + timedelta(seconds=delay),
                error=error,
                error_code=code,
                errors=_appended_errors(job, entry),
                **_end_lease(),
            )
            kind = JobEvent.Kind.RETRY
        else:
            changed = _running(job.pk, job.lease_token).update(
                status=JobStatus.FAILED,
                finished_at=Now(),
                error=error,
                error_code=code,
                errors=_appended_errors(job, entry),
                **_end_lease(),
            )
            kind = JobEvent.Kind.FAILED
        if changed:
            JobEvent.objects.create(
                job_id=job.pk, kind=kind, reason=error, attempt=job.attempts, data={"code": code}
            )
            release_keys(job.concurrency_keys)
            if will_retry:
                _notify(job.queue)
            else:
                _finished(job, JobStatus.FAILED, error=error, error_code=code,
                          errors=_appended_errors(job, entry))
    return bool(changed)


def _policy(kind):
    try:
        return registry.get(kind).policy
    except Exception:
        return registry.Policy()


def _error_entry(job, error, code, exc):
    entry = {"attempt": job.attempts, "code": code, "message": error, "at": timezone.now().isoformat()}
    if exc is not None:
        entry["exception_class_path"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        entry["traceback"] = "".join(traceback.format_exception(exc))
    return entry


def _appended_errors(job, entry):
    # The job in memory was read at claim time; errors only grow while a
    # worker holds the lease, so appending here loses nothing.
    return (list(job.errors or []) + [entry])[-MAX_ERRORS_KEPT:]


def requeue(job, *, reason, delay_s=0, code=None):
    """RUNNING → READY without spending an attempt (a shutdown, or a dead transport, hands it back).

    With `code`, the reason is also left on the row as its error, so pages can
    say why the job waits (e.g. "redis_unavailable").
    """
    reason = str(reason)
    noted = {"error": reason, "error_code": code} if code else {}
    return _hand_back(job, delay_s, JobEvent.Kind.REQUEUED, reason, attempt=job.attempts,
                      data={"code": code} if code else {}, **noted)


def _hand_back(job, delay_s, event, reason, *, attempt, data, **fields):
    """RUNNING → READY `delay_s` from now under this attempt's lease, the attempt given back."""
    with transaction.atomic():
        changed = _running(job.pk, job.lease_token).update(
            status=JobStatus.READY,
            attempts=F("attempts") - 1,
            run_after=Now() + timedelta(seconds=delay_s),
            **fields,
            **_end_lease(),
        )
        if changed:
            JobEvent.objects.create(job_id=job.pk, kind=event, reason=reason, attempt=attempt,
                                    data=data)
            release_keys(job.concurrency_keys)
            _notify(job.queue)
    return bool(changed)


def snooze(job, *, delay_s, reason="", code="snoozed"):
    """RUNNING → READY `delay_s` from now, giving the attempt back (the handler said "not now").

    The JOBS_MAX_SNOOZES+1th snooze of a job fails it instead
    (`snoozed_too_often`): an upstream that is never ready must not keep a
    job alive for ever. A delay past JOBS_SNOOZE_MAX_SECONDS is cut to it; a
    bad one (negative, NaN) is a ValueError before anything is written.
    """
    delay = min(snooze_seconds(delay_s), conf.JOBS_SNOOZE_MAX_SECONDS)
    reason = str(reason) or _("Snoozed: asked to run again later.")
    # `job.snoozes` was read at claim time; only the lease holder changes it.
    if job.snoozes >= conf.JOBS_MAX_SNOOZES:
        return fail(job, error=_("Asked to snooze again after %(n)d snoozes, the most a job may "
                                 "take (JOBS_MAX_SNOOZES); given up.") % {"n": job.snoozes},
                    code="snoozed_too_often", retry=False)
    return _hand_back(job, delay, JobEvent.Kind.SNOOZED, reason, attempt=job.attempts - 1,
                      data={"code": code, "seconds": delay, "snoozes": job.snoozes + 1},
                      snoozes=F("snoozes") + 1, error=reason, error_code=code)


def acknowledge_stop(job, *, reason=""):
    """A worker stopped a job whose cancel or pause was requested: RUNNING → CANCELLED / PAUSED."""
    current = Job.objects.filter(pk=job.pk).values_list("stop_requested", flat=True).first()
    if current == "pause":
        target, extra = JobStatus.PAUSED, {"attempts": F("attempts") - 1}  # a pause spends no attempt
    else:
        target, extra = JobStatus.CANCELLED, {"finished_at": Now()}
    with transaction.atomic():
        changed = _running(job.pk, job.lease_token).update(
            status=target,
            error_code="paused" if target == JobStatus.PAUSED else "cancelled",
            error=reason,
            **extra,
            **_end_lease(),
        )
        if changed:
            release_keys(job.concurrency_keys)
            if target == JobStatus.CANCELLED:
                _finished(job, JobStatus.CANCELLED, error=reason)
    return target if changed else None


def lock_lease(job):
    """Inside a transaction: lock `job`'s row if this attempt still holds its lease; False if not.

    The lock keeps a rescue (or any guarded transition) from taking the job
    until the caller's transaction ends, so a domain write made in it is made
    by the attempt that holds the lease or not at all. SQLite's IMMEDIATE
    transactions serialise writers, which gives the same there.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("lock_lease() only holds its lock inside transaction.atomic().")
    return bool(list(_running(job.pk, job.lease_token).select_for_update().values_list("pk", flat=True)))


def report_progress(job, *, fraction=None, phase=None, message=None):
    """Write progress for a RUNNING job; False means the lease is gone and the handler must stop."""
    fields = {"progress_at": Now()}
    if fraction is not None:
        fields["progress"] = max(0.0, min(1.0, float(fraction)))
    if phase is not None:
        fields["phase"] = str(phase)[:100]
    if message is not None:
        fields["progress_message"] = str(message)[:500]
    return bool(_running(job.pk, job.lease_token).update(**fields))


def renew_leases(worker, jobs):
    """Extend the leases of the jobs this worker still runs; returns the ids whose lease held."""
    if not jobs:
        return set()
    guard = Q()
    for job in jobs:
        guard |= Q(pk=job.pk, lease_token=job.lease_token)
    lease = timedelta(seconds=conf.JOBS_LEASE_SECONDS)
    held = Job.objects.filter(guard, status=JobStatus.RUNNING, worker=worker)
    ids = set(held.values_list("pk", flat=True))
    Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING).update(lease_expires_at=Now() + lease)
    return ids


# --- Concurrency keys: parking and unparking -------------------------------


def park(job_ids, key, queue):
    """Take READY jobs waiting for `key` out of the claim index (caller holds the key's lock).

    Besides the jobs the claim just met, park up to UNPARK_BATCH more of the
    key's READY jobs, so one user's long backlog is set aside in a few
    statements instead of being scanned past on every claim.
    """
    Job.objects.filter(pk__in=job_ids, status=JobStatus.READY).update(blocked_key=key)
    skip = " FOR UPDATE SKIP LOCKED" if sql.is_postgres() else ""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET blocked_key = %s WHERE id IN ("
            "SELECT id FROM jobs_job WHERE status = 'READY' AND blocked_key IS NULL AND queue = %s "
            f"AND {sql.has_key_condition()} LIMIT %s{skip})",
            [key, queue, key, UNPARK_BATCH],
        )


def release_keys(keys):
    """After jobs carrying `keys` left RUNNING: unpark as many waiting jobs as there are free slots."""
    if not keys:
        return
    limits = sql.lock_limits(keys)
    counts = sql.running_counts(list(limits))
    for key, limit in limits.items():
        free = limit - counts.get(key, 0)
        if free <= 0:
            continue
        waiting = (
            Job.objects.filter(status=JobStatus.READY, blocked_key=key)
            .order_by(*CLAIM_ORDER)
            .values_list("pk", flat=True)[:free]
        )
        ids = list(waiting)
        if ids:
            Job.objects.filter(pk__in=ids, status=JobStatus.READY, blocked_key=key).update(blocked_key=None)


def set_limit(key, limit):
    """Change a key's limit (e.g. staff edited a quota) and let waiting jobs use new slots."""
    with transaction.atomic():
        ConcurrencyLimit.objects.update_or_create(key=key, defaults={"limit": limit})
        release_keys([key])


# --- Actions of people (users, staff, the API) -----------------------------


def _event(job_id, kind, actor, reason, **data):
    JobEvent.objects.create(job_id=job_id, kind=kind, actor=actor, reason=reason or "", data=data)


def cancel(job, *, actor=None, reason=""):
    """READY/PAUSED → CANCELLED at once; RUNNING → asks its worker to stop (it then records CANCELLED)."""
    with transaction.atomic():
        changed = Job.objects.filter(
            pk=job.pk, status__in=[JobStatus.READY, JobStatus.PAUSED]
        ).update(status=JobStatus.CANCELLED, finished_at=Now(), error_code="cancelled",
                 error=reason, blocked_key=None)
        if changed:
            _finished(job, JobStatus.CANCELLED, error=reason)
        else:
            changed = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
                stop_requested="cancel"
            )
        if not changed:
            raise IllegalTransition(_("Only a queued, running or paused job can be cancelled."))
        _event(job.pk, JobEvent.Kind.CANCELLED, actor, reason)
    _notify_stop(job.pk)


def pause(job, *, actor=None, reason=""):
    """READY → PAUSED at once; RUNNING → asks its worker to stop (it then records PAUSED)."""
    with transaction.atomic():
        changed = Job.objects.filter(pk=job.pk, status=JobStatus.READY).update(
            status=JobStatus.PAUSED, blocked_key=None
        )
        if not changed:
            changed = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
                stop_requested="pause"
            )
        if not changed:
            raise IllegalTransition(_("Only a queued or running job can be paused."))
        _event(job.pk, JobEvent.Kind.PAUSED, actor, reason)
    _notify_stop(job.pk)


def resume(job, *, actor=None, reason=""):
    """PAUSED → READY, keeping its attempts."""
    with transaction.atomic():
        changed = Job.objects.filter(pk=job.pk, status=JobStatus.PAUSED).update(
            status=JobStatus.READY, run_after=Now(), error_code="", error=""
        )
        if not changed:
            raise IllegalTransition(_("Only a paused job can be resumed."))
        _event(job.pk, JobEvent.Kind.RESUMED, actor, reason)
    _notify(job.queue)


def retry(job, *, actor=None, reason=""):
    """FAILED/CANCELLED → READY with attempts reset (a person asked for another go)."""
    try:
        with transaction.atomic():
            changed = Job.objects.filter(
                pk=job.pk, status__in=[JobStatus.FAILED, JobStatus.CANCELLED]
            ).update(run_after=Now(), **_FRESH_START)
            if not changed:
                raise IllegalTransition(_("Only a failed or cancelled job can be retried."))
            _event(job.pk, JobEvent.Kind.RETRIED, actor, reason)
    except IntegrityError:
        raise IllegalTransition(_("Another job for the same thing is already queued or running.")) from None
    _notify(job.queue)


def set_priority(job, priority, *, actor=None, reason=""):
    _check_priority(priority)
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, status__in=LIVE_STATUSES).update(priority=priority):
            raise IllegalTransition(_("Only a live job's priority can change."))
        _event(job.pk, JobEvent.Kind.PRIORITY, actor, reason, priority=priority)


def _notify_stop(job_id):
    from jobs import wakeup

    wakeup.notify_stop(job_id)


# Staff's ordering. Positions are whole numbers and ties fall back to age, so
# putting a job right before another may need the jobs ahead of that one (at
# its priority) to step forward one position each; a move renumbers at most
# this many, which bounds its cost by how far forward it reaches.
MOVE_RENUMBER_MAX = 1000


def _ahead_q(job):
    """READY jobs that claim order puts before `job` (the claim's keys, compared in order)."""
    return (
        Q(priority__gt=job.priority)
        | Q(priority=job.priority, position__lt=job.position)
        | Q(priority=job.priority, position=job.position, enqueued_at__lt=job.enqueued_at)
        | Q(priority=job.priority, position=job.position, enqueued_at=job.enqueued_at, pk__lt=job.pk)
    )


def _behind_q(job):
    return (
        Q(priority__lt=job.priority)
        | Q(priority=job.priority, position__gt=job.position)
        | Q(priority=job.priority, position=job.position, enqueued_at__gt=job.enqueued_at)
        | Q(priority=job.priority, position=job.position, enqueued_at=job.enqueued_at, pk__gt=job.pk)
    )


def _claim_key(job):
    return (-job.priority, job.position, job.enqueued_at, job.pk)


def _ready_in_order(queue, condition, *, reverse=False, limit=1):
    """READY jobs of `queue` matching `condition`, in claim order, the first `limit`.

    Asked of the claimable and the parked jobs separately, so each half is
    read from its own partial index instead of scanning the whole table, then
    merged by the claim's key.
    """
    order = [f"-{f}" if not f.startswith("-") else f[1:] for f in CLAIM_ORDER] if reverse else CLAIM_ORDER
    fields = ("pk", "queue", "priority", "position", "enqueued_at")
    rows = []
    for parked in (False, True):
        rows.extend(
            Job.objects.filter(condition, queue=queue, status=JobStatus.READY,
                               blocked_key__isnull=not parked)
            .order_by(*order).only(*fields)[:limit]
        )
    rows.sort(key=_claim_key, reverse=reverse)
    return rows[:limit]


def _neighbour(job, *, ahead):
    rows = _ready_in_order(job.queue, (_ahead_q if ahead else _behind_q)(job) & ~Q(pk=job.pk),
                           reverse=ahead)
    return rows[0] if rows else None


def _place_before(job, target):
    """New positions that put `job` right before `target` in claim order, at target's priority.

    The job takes `position - 1` of the target; the jobs of that priority
    ahead of the target step forward only while they would otherwise sort
    behind the job, nearest first, so their order among themselves holds and
    nothing behind the target is touched. Returns {job id: new position}.
    """
    moves = {job.pk: target.position - 1}
    bound = (target.position - 1, job.enqueued_at, job.pk)
    ahead = _ready_in_order(
        target.queue, Q(priority=target.priority) & _ahead_q(target) & ~Q(pk=job.pk),
        reverse=True, limit=MOVE_RENUMBER_MAX + 1,
    )
    for other in ahead:
        if (other.position, other.enqueued_at, other.pk) < bound:
            return moves
        if len(moves) > MOVE_RENUMBER_MAX:
            break
        moves[other.pk] = bound[0] - 1
        bound = (bound[0] - 1, other.enqueued_at, other.pk)
    else:
        return moves
    raise IllegalTransition(
        _("This job is too far back to move one place at a time; move it to the front "
          "or change its priority instead.")
    )


def _move(job, how, *, actor, reason):
    """Reorder a READY job (`how`: front, up, down); False when it already stands there."""
    from django.db.models import Case, Value, When

    with transaction.atomic():
        # The guard and the neighbours are read in one transaction; a job
        # claimed meanwhile fails the guarded UPDATEs below and is left alone.
        current = Job.objects.filter(pk=job.pk, status=JobStatus.READY).first()
        if current is None:
            raise IllegalTransition(_("Only a queued job can be moved."))
        if how == "down":
            after = _neighbour(current, ahead=False)
            if after is None:
                return False
            beyond = _neighbour(after, ahead=False)
            if beyond is not None and beyond.priority == after.priority:
                priority, moves = after.priority, _place_before(current, beyond)
            else:  # `after` is the last of its priority: the job goes right behind it
                priority, moves = after.priority, {current.pk: after.position + 1}
        else:
            if how == "front":
                target = (_ready_in_order(current.queue, ~Q(pk=current.pk)) or [None])[0]
                if target is not None and _claim_key(target) > _claim_key(current):
                    target = None  # already first
            else:
                target = _neighbour(current, ahead=True)
            if target is None:
                return False
            priority, moves = target.priority, _place_before(current, target)
        position = moves.pop(current.pk)
        if not Job.objects.filter(pk=current.pk, status=JobStatus.READY).update(
            priority=priority, position=position
        ):
            raise IllegalTransition(_("Only a queued job can be moved."))
        if moves:
            Job.objects.filter(pk__in=list(moves), status=JobStatus.READY).update(
                position=Case(*(When(pk=pk, then=Value(p)) for pk, p in moves.items()),
                              default=F("position"), output_field=Job._meta.get_field("position"))
            )
        _event(current.pk, JobEvent.Kind.MOVED, actor, reason, how=how, priority=priority,
               position=position, was=[current.priority, current.position], renumbered=len(moves))
    return True


def move_to_front(job, *, actor=None, reason=""):
    """READY: first in its queue's claim order (the top priority, a position before all of it)."""
    return _move(job, "front", actor=actor, reason=reason)


def move_up(job, *, actor=None, reason=""):
    """READY: swap places with the job workers would take just before it (taking its priority)."""
    return _move(job, "up", actor=actor, reason=reason)


def move_down(job, *, actor=None, reason=""):
    """READY: swap places with the job workers would take just after it (taking its priority)."""
    return _move(job, "down", actor=actor, reason=reason)


def set_priority_tier(job, priority, *, actor=None, reason=""):
    """A live job joins priority `priority` in age order: its manual position is cleared."""
    _check_priority(priority)
    with transaction.atomic():
        was = Job.objects.filter(pk=job.pk).values_list("priority", flat=True).first()
        if not Job.objects.filter(pk=job.pk, status__in=LIVE_STATUSES).update(
            priority=priority, position=0
        ):
            raise IllegalTransition(_("Only a live job's priority can change."))
        _event(job.pk, JobEvent.Kind.PRIORITY, actor, reason, priority=priority, was=was)


def retry_matching(queryset, *, actor=None, reason="", batch_size=500):
    """Retry every FAILED job of `queryset`, one `retry()` each; returns (retried, skipped).

    Walks the ids in primary-key batches, so a filter that matches millions of
    jobs never loads them at once or holds one long transaction.
    """
    retried = skipped = 0
    failed = (queryset.filter(status=JobStatus.FAILED).select_related(None).order_by("pk")
              .only("pk", "queue"))
    last = 0
    while batch := list(failed.filter(pk__gt=last)[:batch_size]):
        for job in batch:
            try:
                retry(job, actor=actor, reason=reason)
                retried += 1
            except IllegalTransition:
                skipped += 1
        last = batch[-1].pk
    return retried, skipped


def command_worker(worker, command, *, actor=None):
    """Tell a live worker to stop claiming ("quiet") or to shut down gracefully ("stop").

    The worker reads its command at its next heartbeat (JOBS_HEARTBEAT_SECONDS).
    """
    from jobs.models import Worker

    if command not in (Worker.Command.QUIET, Worker.Command.STOP):
        raise ValueError(_("A worker can be told to quiet or to stop, nothing else."))
    if not Worker.objects.filter(pk=worker.pk, stopped_at__isnull=True).update(command=command):
        raise IllegalTransition(_("That worker has already stopped."))
    log.info("worker %s told to %s by %s", worker.name, command, actor or "nobody")


# --- Recovery (the reaper, in every runworker) -----------------------------


def rescue_expired(limit=500):
    """RUNNING jobs whose lease expired go back to READY after the kind's backoff, or FAILED
    when attempts are spent.

    Only an *expired* lease is taken: a live worker on another machine renews
    its leases, so its jobs are never touched. The attempt the dead worker
    started counts: a job that kills its worker cannot loop forever.
    """
    expired = list(Job.objects.filter(status=JobStatus.RUNNING, lease_expires_at__lt=Now())[:limit])
    rescued = []
    for job in expired:
        guard = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, lease_token=job.lease_token,
                                   lease_expires_at__lt=Now())
        message = _("The worker running this job stopped answering; its lease expired.")
        with transaction.atomic():
            if job.stop_requested == "cancel":
                changed = guard.update(status=JobStatus.CANCELLED, finished_at=Now(),
                                       error_code="cancelled", **_end_lease())
            elif job.stop_requested == "pause":
                changed = guard.update(status=JobStatus.PAUSED, attempts=F("attempts") - 1,
                                       error_code="paused", **_end_lease())
            elif job.attempts < job.max_attempts:
                # After the kind's backoff, as any failed attempt: a job that
                # kills its worker would otherwise take down the next one at once.
                delay = _policy(job.kind).backoff_s(job.attempts)
                changed = guard.update(status=JobStatus.READY,
                                       run_after=Now() + timedelta(seconds=delay), error=message,
                                       error_code="lease_expired", **_end_lease())
            else:
                entry = _error_entry(job, message, "lease_expired", None)
                changed = guard.update(status=JobStatus.FAILED, finished_at=Now(), error=message,
                                       error_code="lease_expired",
                                       errors=_appended_errors(job, entry), **_end_lease())
            if changed:
                JobEvent.objects.create(job_id=job.pk, kind=JobEvent.Kind.RESCUED,
                                        reason=message, attempt=job.attempts)
                if job.stop_requested == "cancel":
                    _finished(job, JobStatus.CANCELLED)
                elif job.stop_requested != "pause" and job.attempts >= job.max_attempts:
                    _finished(job, JobStatus.FAILED, error=message, error_code="lease_expired")
                release_keys(job.concurrency_keys)
                rescued.append(job.pk)
        if changed:
            _notify(job.queue)
            if job.stop_requested == "cancel":
                _clean_up_after_dead_worker(job, "cancelled")
            elif job.stop_requested != "pause" and job.attempts >= job.max_attempts:
                _clean_up_after_dead_worker(job, "lease_expired")
    return rescued


def _clean_up_after_dead_worker(job, reason):
    """A job its rescue ended for good gets the cleanup its dead worker never ran.

    Without it what the job held outside the queue (an asset marked as being
    downloaded, a partial file) stays held, as no attempt comes to take it
    over. A rescue that requeues or pauses leaves that to the next attempt.
    """
    try:
        cleanup = registry.get(job.kind).policy.cleanup
        if cleanup is not None:
            cleanup(job, reason=reason)  # `job` still carries the dead attempt's lease token
    except Exception:  # noqa: BLE001 - the rescue itself is done and committed
        log.exception("cleanup after the rescue of job %s failed", job.pk)


def fail_unserved(served_kinds):
    """READY jobs of a kind no live worker serves fail after JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS."""
    cutoff = Now() - timedelta(seconds=conf.JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS)
    stale = Job.objects.filter(status=JobStatus.READY, enqueued_at__lt=cutoff).exclude(
        kind__in=served_kinds
    )
    message = _("No worker serves this kind of job; deploy a worker that registers it, then retry.")
    failed = 0
    for job in stale[:500]:
        if Job.objects.filter(pk=job.pk, status=JobStatus.READY).update(
            status=JobStatus.FAILED, finished_at=Now(), error=message, error_code="unknown_kind",
            blocked_key=None,
        ):
            log.warning("failed job %s: no live worker serves its kind %r", job.pk, job.kind)
            _finished(job, JobStatus.FAILED, error=message, error_code="unknown_kind")
            failed += 1
    return failed


def fail_unreadable(job_ids, *, code):
    """READY jobs whose row the engine cannot use (written by hand, say) → FAILED, never retried."""
    message = _("The job's stored data cannot be read, so it was failed instead of run.")
    for job in Job.objects.filter(pk__in=job_ids, status=JobStatus.READY):
        if Job.objects.filter(pk=job.pk, status=JobStatus.READY).update(
            status=JobStatus.FAILED, finished_at=Now(), error=message, error_code=code,
            blocked_key=None,
        ):
            _finished(job, JobStatus.FAILED, error=message, error_code=code)


def unpark_stranded():
    """Safety net: unpark jobs parked behind keys that have free slots.

    Every transition that frees a slot unparks in its own transaction; this
    only catches rows whose RUNNING job vanished without one (a row deleted by hand).
    """
    keys = list(
        Job.objects.filter(status=JobStatus.READY, blocked_key__isnull=False)
        .values_list("blocked_key", flat=True).distinct()[:200]
    )
    for key in keys:
        with transaction.atomic():
            release_keys([key])


def ensure_queues():
    """Create the Queue rows named in JOBS_QUEUES that do not exist yet (never overwrite staff's edits)."""
    from jobs.models import Queue

    for name, defaults in conf.queue_defaults().items():
        Queue.objects.get_or_create(name=name, defaults=defaults)


def set_queue(name, **changes):
    """Change a queue's live settings (paused, concurrency, gap_seconds) for the whole fleet."""
    from jobs.models import Queue

    Queue.objects.update_or_create(name=name, defaults=changes)
    from jobs import claiming

    claiming.forget_queue_settings()
    _notify(name)


__all__ = [
    "FINISHED_STATUSES",
    "enqueue",
    "enqueue_many",
    "complete",
    "complete_many",
    "fail",
    "requeue",
    "snooze",
    "acknowledge_stop",
    "report_progress",
    "renew_leases",
    "cancel",
    "pause",
    "resume",
    "retry",
    "set_priority",
    "set_limit",
    "rescue_expired",
    "fail_unserved",
    "unpark_stranded",
    "ensure_queues",
    "set_queue",
]
