"""The engine's tables: every job of every kind is one row of `Job`.

The states and which transitions move a job between them are documented in
docs/lifecycle.md; the transitions themselves live in `jobs/engine/transitions.py` (people's
verbs: `jobs/engine/actions.py`), one guarded UPDATE each, and how an attempt's end picks one in `jobs/engine/outcome.py`.
Nothing else writes `status`.
"""

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from jobs.bounds import GAP_SECONDS_MAX, LIMIT_MAX, RATE_PERIOD_MAX_S

PRIORITY_MIN, PRIORITY_MAX = -100, 100  # Django's Tasks convention: higher runs first


class JobStatus(models.TextChoices):
    # Waiting to be claimed (possibly not before `run_after`). In: enqueue,
    # retry, snooze, resume, lease rescue, graceful shutdown. Out: claim, pause, cancel.
    READY = "READY", _("Queued")
    # Claimed by a worker that holds a lease. Out: success, failure, retry, snooze,
    # pause, cancel, lease rescue, shutdown requeue.
    RUNNING = "RUNNING", _("Running")
    # Held back by a person; never claimed. Out: resume (to READY), cancel.
    PAUSED = "PAUSED", _("Paused")
    # Final states. Out: a manual retry, a new fingerprint, a FAILED job asked
    # for again after its kind's cool-down.
    SUCCESSFUL = "SUCCESSFUL", _("Successful")
    FAILED = "FAILED", _("Failed")
    CANCELLED = "CANCELLED", _("Cancelled")


class Outcome(models.TextChoices):
    """How an attempt ended: the one word for it in stop requests, events, logs and pages.

    jobs/engine/outcome.py says where each leads (the table in its docstring); each is a JobEvent
    kind too.
    """

    SUCCEEDED = "succeeded", _("succeeded")
    RETRY = "retry", _("failed, to be retried")  # the handler failed or asked for a retry
    SNOOZED = "snoozed", _("snoozed")  # "not now": again later, the attempt given back
    FAILED = "failed", _("failed")  # for good: Fail raised, or attempts spent
    CANCELLED = "cancelled", _("cancelled")
    PAUSED = "paused", _("paused")
    REQUEUED = "requeued", _("handed back to the queue")  # a worker shutting down, a dead Redis
    LEASE_LOST = "lease_lost", _("lost its lease")  # another worker may own it: nothing written
    TIMEOUT = "timeout", _("ran past its time limit")
    STALLED = "stalled", _("stopped showing signs of life")
    CRASHED = "crashed", _("crashed")  # its process ended without recording a result
    EXPIRED = "expired", _("its worker stopped answering")  # the reaper found its lease expired


class Action(models.TextChoices):
    """What people (and enqueue) do to a job besides ending its attempts; JobEvent kinds too."""

    CANCEL_REQUESTED = "cancel_requested", _("cancel requested")
    PAUSE_REQUESTED = "pause_requested", _("pause requested")
    RESUMED = "resumed", _("resumed")
    RETRIED = "retried", _("retried by hand")
    REARMED = "rearmed", _("re-armed after cool-down")
    MOVED = "moved", _("moved in the queue")
    PRIORITY = "priority", _("priority changed")
    RUN_AGAIN = "run_again", _("run again for newer data")


class OnDependencyFailure(models.TextChoices):
    """What a dependent does when one of its parents ends FAILED or CANCELLED."""

    CANCEL = "cancel", _("cancel it")  # CANCELLED with error_code "dependency_failed"
    RUN = "run", _("run it anyway")


LIVE_STATUSES = (JobStatus.READY, JobStatus.RUNNING, JobStatus.PAUSED)
FINISHED_STATUSES = (JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.CANCELLED)


class JobQuerySet(models.QuerySet):
    def live(self):
        return self.filter(status__in=LIVE_STATUSES)

    def finished(self):
        return self.filter(status__in=FINISHED_STATUSES)

    def ready(self):
        return self.filter(status=JobStatus.READY)

    def running(self):
        return self.filter(status=JobStatus.RUNNING)

    def in_claim_order(self):
        """The order workers take READY jobs in; the claim SQL and every page share it."""
        return self.order_by(*CLAIM_ORDER)


# The one ordering expression: priority, then staff's manual position, then age.
CLAIM_ORDER = ("-priority", "position", "enqueued_at", "id")

# The one definition of which READY jobs a worker may take: those not parked
# behind a full key, a rate window or unfinished parents (`blocked_key` set).
# Every READY job is exactly one of the two, and each has its partial index
# below; jobs/engine/queries.py spells CLAIMABLE once in SQL (CLAIMABLE_SQL).
CLAIMABLE = Q(status=JobStatus.READY, blocked_key__isnull=True)
PARKED = Q(status=JobStatus.READY, blocked_key__isnull=False)


class Job(models.Model):
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(_("kind"), max_length=200)
    queue = models.CharField(_("queue"), max_length=100, default="default")
    payload = models.JSONField(_("payload"), default=dict)
    status = models.CharField(_("status"), max_length=10, choices=JobStatus, default=JobStatus.READY)
    priority = models.SmallIntegerField(_("priority"), default=0, validators=[
        MinValueValidator(PRIORITY_MIN), MaxValueValidator(PRIORITY_MAX)])
    # Staff's ordering within a priority: lower runs first; "move to front"
    # writes a value below the queue's smallest.
    position = models.BigIntegerField(_("position"), default=0)
    # Indexed by jobs_job_owner_status, which begins with it (an index of its own
    # was written by every enqueue, claim and completion for nothing).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs",
        db_index=False,
    )
    # NULL, not "", means "no key": the partial unique index ignores NULLs.
    unique_key = models.CharField(_("unique key"), max_length=255, null=True, blank=True)  # noqa: DJ001
    fingerprint = models.CharField(_("fingerprint"), max_length=128, blank=True, default="")
    # A newer fingerprint asked for while the job ran ("" for none): when it ends it runs
    # again for that data, or takes it if it goes back to READY (jobs/engine/transitions.py).
    asked_fingerprint = models.CharField(_("asked fingerprint"), max_length=128, blank=True,
                                         default="", db_default="")
    # The payload a replace (enqueue(replace=("payload",))) asked for while the job ran, NULL
    # for none: when it ends it runs once more with it, or takes it if it goes back to READY
    # or PAUSED (jobs/engine/transitions.py). The latest request's; never JSON null (a
    # payload of None is {}), so NULL alone means nothing asked.
    asked_payload = models.JSONField(_("asked payload"), null=True, blank=True)
    concurrency_keys = models.JSONField(_("concurrency keys"), default=list, blank=True)
    # At most a rate limit's N starts per period share this key ("" for none; jobs/engine/limits.py).
    rate_key = models.CharField(_("rate key"), max_length=255, blank=True, default="", db_default="")
    # Set while a READY job may not start yet: such jobs leave the claim index,
    # so one user's 100k queued jobs never make the claim scan past them (see
    # jobs/engine/claiming.py). A concurrency key at its limit, "@rate:<key>" for a
    # rate key whose window is full, "@parents" for a dependent whose parents
    # have not all finished (jobs/engine/dependencies.py).
    blocked_key = models.CharField(max_length=255, null=True, blank=True, editable=False)  # noqa: DJ001
    on_dependency_failure = models.CharField(
        _("on dependency failure"), max_length=10, choices=OnDependencyFailure,
        default=OnDependencyFailure.CANCEL, db_default=OnDependencyFailure.CANCEL)
    # Set once a job is linked as a parent: only then does its final transition
    # look for dependents to decide, so jobs without any pay nothing for it.
    has_dependents = models.BooleanField(default=False, db_default=False, editable=False)
    # "cancelled" or "paused" (an Outcome) asked of a RUNNING job: it stays RUNNING
    # (holding its slots) until its worker has really stopped it, so limits hold.
    stop_requested = models.CharField(max_length=10, blank=True, default="")
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    max_attempts = models.PositiveIntegerField(_("max attempts"), default=1)
    # Times a handler said "not now" (Snooze) since the job last started
    # afresh; they spend no attempt, and JOBS_MAX_SNOOZES bounds them.
    snoozes = models.PositiveIntegerField(_("snoozes"), default=0)
    run_after = models.DateTimeField(_("run after"), default=timezone.now)

    # The lease: which worker holds the job, with which token, until when.
    # Set only while the job runs: indexed by jobs_job_worker, which holds those rows alone.
    worker = models.ForeignKey(
        "jobs.Worker", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs",
        db_index=False,
    )
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Django's TaskResult.worker_ids: one entry per attempt.
    worker_ids = models.JSONField(default=list, blank=True)

    progress = models.FloatField(_("progress"), null=True, blank=True)  # 0..1
    phase = models.CharField(_("phase"), max_length=100, blank=True, default="")
    progress_message = models.CharField(max_length=500, blank=True, default="")
    progress_at = models.DateTimeField(null=True, blank=True)

    result = models.JSONField(_("result"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True, default="")
    error_code = models.CharField(_("error code"), max_length=50, blank=True, default="")
    # One entry per failed attempt: exception path, traceback, code (capped).
    errors = models.JSONField(default=list, blank=True)

    enqueued_at = models.DateTimeField(_("enqueued"), default=timezone.now)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)  # the latest attempt
    # The first attempt's start, kept through retries (Django's TaskResult.started_at).
    first_started_at = models.DateTimeField(_("first started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        # The admin's actions, each its own permission, so a read-only staff
        # role (view_job alone) sees the queue without steering it.
        permissions = [
            ("can_retry", _("Can retry failed or cancelled jobs")),
            ("can_reorder", _("Can move jobs in the queue and change their priority")),
            ("can_cancel", _("Can cancel jobs")),
            ("can_pause", _("Can pause and resume jobs")),
            ("can_manage_queues", _("Can pause queues and change their limits")),
            ("can_manage_workers", _("Can quiet and stop workers")),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN) & Q(priority__lte=PRIORITY_MAX),
                name="jobs_job_priority_range",
            ),
            # At most one live job per unique key; enqueue upserts against it.
            models.UniqueConstraint(
                fields=["unique_key"],
                condition=Q(status__in=LIVE_STATUSES),
                name="jobs_job_unique_live_key",
            ),
        ]
        indexes = [
            # The claim: exactly the claimable set, in claim order.
            models.Index(
                "queue", models.F("priority").desc(), "position", "enqueued_at", "id",
                condition=CLAIMABLE, name="jobs_job_claimable",
            ),
            # Each queue's longest wait (metrics, the dashboard, the queue sample): the
            # first entry of each queue's slice, not a read of every claimable row.
            models.Index(fields=["queue", "run_after"], condition=CLAIMABLE, name="jobs_job_waiting"),
            # Jobs parked behind a busy key, unparked one per freed slot.
            models.Index(
                "blocked_key", models.F("priority").desc(), "position", "enqueued_at", "id",
                condition=PARKED, name="jobs_job_blocked",
            ),
            # Running jobs: lease renewal, rescue, per-key counts. Small by nature.
            models.Index(fields=["lease_expires_at"], condition=Q(status=JobStatus.RUNNING),
                         name="jobs_job_running"),
            models.Index(fields=["unique_key", "-id"], condition=Q(unique_key__isnull=False),
                         name="jobs_job_unique_key"),
            # A user's jobs; jobs nobody owns (most Tasks-API jobs) are not written to it.
            models.Index(fields=["owner", "status"], condition=Q(owner__isnull=False),
                         name="jobs_job_owner_status"),
            models.Index(fields=["worker"], condition=Q(worker__isnull=False), name="jobs_job_worker"),
            models.Index(fields=["finished_at"], condition=Q(status__in=FINISHED_STATUSES),
                         name="jobs_job_finished"),
        ]

    def __str__(self):
        return f"{self.kind} #{self.pk} ({self.get_status_display()})"

    @property
    def is_live(self):
        return self.status in LIVE_STATUSES

    @property
    def is_finished(self):
        return self.status in FINISHED_STATUSES


class JobEvent(models.Model):
    """One per transition of a job (jobs/engine/history.py writes them), and per staff action on it."""

    KINDS = [*Outcome.choices, *Action.choices]

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=20, choices=KINDS)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reason = models.TextField(blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self):
        return f"{self.get_kind_display()} at {self.at:%Y-%m-%d %H:%M:%S}"


class Worker(models.Model):
    """A registered `runworker` process and its heartbeat (CV workers beat in Redis)."""

    class Command(models.TextChoices):
        NONE = "", _("none")
        QUIET = "quiet", _("stop claiming")
        STOP = "stop", _("stop")

    name = models.CharField(max_length=200)  # --worker-id, or host:pid
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    kinds = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)
    command = models.CharField(max_length=10, choices=Command, blank=True, default="")

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        indexes = [models.Index(fields=["heartbeat_at"], condition=Q(stopped_at__isnull=True),
                                name="jobs_worker_alive")]

    def __str__(self):
        return self.name


class Queue(models.Model):
    """Per-queue settings staff change live; a queue without a row uses the defaults."""

    name = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    # Jobs of this queue running at once across the whole deployment (null: no limit).
    concurrency = models.PositiveIntegerField(null=True, blank=True,
                                              validators=[MaxValueValidator(LIMIT_MAX)])
    # The queue rests this long after each start and after each end of one of
    # its jobs (success or not) before it starts the next one.
    gap_seconds = models.FloatField(default=0, validators=[
        MinValueValidator(0), MaxValueValidator(GAP_SECONDS_MAX)])
    # The end of the current rest: no job of the queue starts before it.
    rests_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("queue")
        verbose_name_plural = _("queues")

    def __str__(self):
        return self.name


class RateLimit(models.Model):
    """At most `limit` jobs carrying `key` start within any `period_seconds` (a sliding window).

    `starts` holds the window: the database clock's epoch seconds of the
    recent starts, oldest first, at most `limit` of them. `opens_at` is set
    while jobs wait for the window: when its oldest start leaves it, and a
    worker unparks them (jobs/engine/limits.py).
    """

    key = models.CharField(max_length=255, primary_key=True)
    limit = models.PositiveIntegerField(_("starts"), validators=[
        MinValueValidator(1), MaxValueValidator(LIMIT_MAX)])
    period_seconds = models.FloatField(_("per seconds"), validators=[
        MinValueValidator(0.001), MaxValueValidator(RATE_PERIOD_MAX_S)])
    starts = models.JSONField(default=list, blank=True, editable=False)
    opens_at = models.DateTimeField(_("opens at"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("rate limit")
        verbose_name_plural = _("rate limits")
        indexes = [models.Index(fields=["opens_at"], condition=Q(opens_at__isnull=False),
                                name="jobs_ratelimit_opens")]

    def __str__(self):
        return f"{self.key} ≤ {self.limit}/{self.period_seconds:g}s"


class JobDependency(models.Model):
    """The dependent (`child`) may start only once `parent` is SUCCESSFUL (jobs/engine/dependencies.py)."""

    parent = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="child_links")
    child = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="parent_links")

    class Meta:
        verbose_name = _("job dependency")
        verbose_name_plural = _("job dependencies")
        constraints = [models.UniqueConstraint(fields=["parent", "child"],
                                               name="jobs_dependency_unique")]

    def __str__(self):
        return f"#{self.parent_id} → #{self.child_id}"


class ConcurrencyLimit(models.Model):
    """How many RUNNING jobs may carry `key` at once (e.g. "user:42" -> 2)."""

    key = models.CharField(max_length=255, primary_key=True)
    limit = models.PositiveIntegerField(validators=[MaxValueValidator(LIMIT_MAX)])

    class Meta:
        verbose_name = _("concurrency limit")
        verbose_name_plural = _("concurrency limits")

    def __str__(self):
        return f"{self.key} ≤ {self.limit}"


# Upper bounds (seconds) of the duration histogram's buckets; the last column
# counts what took longer. Enough resolution for p50/p95 of jobs that take a
# tenth of a second to an hour (jobs/engine/rollup.py interpolates within a bucket).
DURATION_BOUNDS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
DURATION_COLUMNS = tuple(f"took_{i:02d}" for i in range(len(DURATION_BOUNDS_S) + 1))


class JobRollup(models.Model):
    """What finished in one minute, for one queue and kind: written by jobs/engine/rollup.py in the
    transaction that finishes each job, so a rolled-back transition counts nothing.

    The dashboard and `/metrics` read only these rows (never a scan of jobs); they are
    pruned with the job history.
    """

    queue = models.CharField(max_length=100)
    kind = models.CharField(max_length=200)
    minute = models.DateTimeField()  # the start of the minute (UTC), seconds zero
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)  # for good
    cancelled = models.PositiveIntegerField(default=0)
    retried = models.PositiveIntegerField(default=0)  # attempts that failed and go again
    # Run time of the last attempt of jobs that succeeded or failed: count, sum, max,
    # and a histogram (one column per DURATION_BOUNDS_S bucket, then "longer").
    took_count = models.PositiveIntegerField(default=0)
    took_sum_s = models.FloatField(default=0)
    took_max_s = models.FloatField(default=0)
    took_00 = models.PositiveIntegerField(default=0)
    took_01 = models.PositiveIntegerField(default=0)
    took_02 = models.PositiveIntegerField(default=0)
    took_03 = models.PositiveIntegerField(default=0)
    took_04 = models.PositiveIntegerField(default=0)
    took_05 = models.PositiveIntegerField(default=0)
    took_06 = models.PositiveIntegerField(default=0)
    took_07 = models.PositiveIntegerField(default=0)
    took_08 = models.PositiveIntegerField(default=0)
    took_09 = models.PositiveIntegerField(default=0)
    took_10 = models.PositiveIntegerField(default=0)
    took_11 = models.PositiveIntegerField(default=0)
    took_12 = models.PositiveIntegerField(default=0)
    took_13 = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = _("job rollup")
        verbose_name_plural = _("job rollups")
        constraints = [
            # The upsert's conflict target: one row per queue, kind and minute.
            models.UniqueConstraint(fields=["queue", "kind", "minute"], name="jobs_rollup_unique"),
        ]
        # Every read is "since some minute"; the prune deletes "before" one.
        indexes = [models.Index(fields=["minute"], name="jobs_rollup_minute")]

    def __str__(self):
        return f"{self.queue}/{self.kind} at {self.minute:%Y-%m-%d %H:%M}"


class QueueSample(models.Model):
    """A queue's state at the start of one minute: what waits, how long the oldest has waited,
    what runs. Taken by whichever worker first sees the minute without one (jobs/maintenance/sampling.py),
    from the partial indexes' counts."""

    queue = models.CharField(max_length=100)
    minute = models.DateTimeField()
    ready = models.PositiveIntegerField(default=0)  # runnable now (not parked, not scheduled)
    waiting = models.PositiveIntegerField(default=0)  # READY in all: parked and scheduled too
    running = models.PositiveIntegerField(default=0)
    latency_s = models.FloatField(default=0)  # age of the oldest runnable job

    class Meta:
        verbose_name = _("queue sample")
        verbose_name_plural = _("queue samples")
        constraints = [
            models.UniqueConstraint(fields=["queue", "minute"], name="jobs_queuesample_unique"),
        ]
        indexes = [models.Index(fields=["minute"], name="jobs_queuesample_minute")]

    def __str__(self):
        return f"{self.queue} at {self.minute:%Y-%m-%d %H:%M}"


class FailureNotice(models.Model):
    """Failures of one kind and error code not yet told to one notice target (jobs/notices.py).

    Every job that fails for good adds one to `pending` in its final
    transaction; at most one notice job is `scheduled` per row at a time, and
    the notice that tells them takes its count back when it succeeds: an outage
    sends one message per JOBS_FAILURE_NOTIFY_WINDOW_SECONDS, saying how many failed.
    """

    target = models.CharField(max_length=64)  # a digest of the address: no secret in the table
    kind = models.CharField(max_length=200)
    error_code = models.CharField(max_length=50, blank=True, default="")
    pending = models.PositiveIntegerField(default=0)  # failures not told yet
    since = models.DateTimeField(null=True, blank=True)  # the first of them
    last_job_id = models.BigIntegerField(null=True, blank=True)  # not a key: pruning may take it
    scheduled = models.BooleanField(default=False)  # a notice job is queued or running
    sent_at = models.DateTimeField(null=True, blank=True)  # the last notice told

    class Meta:
        verbose_name = _("failure notice")
        verbose_name_plural = _("failure notices")
        constraints = [
            models.UniqueConstraint(fields=["target", "kind", "error_code"],
                                    name="jobs_failurenotice_unique"),
        ]

    def __str__(self):
        return f"{self.kind} [{self.error_code}]: {self.pending} pending"
