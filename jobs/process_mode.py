"""The `process` execution mode: the job runs in a supervised child process.

The worker's thread for the job spawns `python -m jobs.child <id> <token>` in
its own process group and watches it (jobs/supervisor.py). The child writes
progress and its final state itself, guarded by the lease token; the parent
steps in only when the child cannot: a cancel or pause, no liveness for the
stall timeout, the wall-clock cap, a lost lease, the worker shutting down, or
a crash. Each stop records its reason as the job's error code.
"""

import logging
import sys

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from jobs import conf, registry, services
from jobs.childside import Limits
from jobs.models import Job, JobStatus
from jobs.supervisor import Child, StopReason, WatchSettings, python_env, watch

log = logging.getLogger(__name__)

# A stop request of the engine, as the supervisor names it.
ENGINE_REASONS = {
    "cancel": StopReason.CANCELLED,
    "pause": StopReason.PAUSED,
    "shutdown": StopReason.SHUTDOWN,
    "lease_lost": StopReason.LEASE_LOST,
    "timeout": StopReason.TIMEOUT,
}

MESSAGES = {
    StopReason.STALLED: gettext_lazy("The job stopped showing signs of life for %(s)d s and was stopped."),
    StopReason.TIMEOUT: gettext_lazy("The job ran past its time limit of %(s)d s and was stopped."),
}


def watch_settings(policy):
    options = policy.options
    return WatchSettings(
        stall_timeout_s=options.get("stall_timeout_s", conf.JOBS_STALL_TIMEOUT_SECONDS),
        wall_clock_cap_s=policy.timeout_s or options.get("wall_clock_cap_s", conf.JOBS_WALL_CLOCK_CAP_SECONDS),
        kill_grace_s=options.get("kill_grace_s", conf.JOBS_KILL_GRACE_SECONDS),
        poll_interval_s=options.get("poll_interval_s", conf.JOBS_SUPERVISOR_POLL_SECONDS),
    )


def runner(worker):
    """The function a worker thread runs for one process-mode job."""

    def run(entry):
        job, ctx = entry.job, entry.ctx
        policy = registry.get(job.kind).policy
        knobs = watch_settings(policy)
        try:
            child = Child.spawn(
                [sys.executable, "-m", "jobs.child", str(job.pk), str(job.lease_token)],
                env=python_env(),
                marker=f"job-{job.pk}-{job.lease_token}",
                limits=Limits(**policy.options.get("limits", {})),
            )
        except OSError as exc:
            services.fail(job, error=_("The job's process could not start: %(e)s") % {"e": exc},
                          code="spawn_failed")
            worker.release(entry)
            return
        entry.child = child
        outcome = watch(child, knobs, should_stop=lambda: ENGINE_REASONS.get(ctx.stop_reason))
        try:
            record(job, outcome, knobs)
        except Exception:  # noqa: BLE001 - the lease expires and the reaper takes over
            log.exception("could not record how job %s ended", job.pk)
            worker.reset_connection()
        finally:
            worker.release(entry)

    return run


def record(job, outcome, knobs):
    """Write what the parent knows about how the child ended, then let the kind clean up."""
    reason = StopReason(outcome.reason)
    policy = registry.get(job.kind).policy
    if reason == StopReason.EXITED:
        # The child recorded its own outcome; if it could not, its lease
        # says so: the job is still RUNNING under our token.
        if Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, lease_token=job.lease_token).exists():
            services.fail(job, error=_("The job's process exited without recording a result."),
                          code="crashed")
    elif reason in (StopReason.CANCELLED, StopReason.PAUSED):
        services.acknowledge_stop(job, reason=outcome.describe())
    elif reason == StopReason.SHUTDOWN:
        services.requeue(job, reason=_("The worker shut down; the job was handed back to the queue."))
    elif reason == StopReason.LEASE_LOST:
        log.info("job %s lost its lease; its process was stopped", job.pk)
    elif reason == StopReason.CRASHED:
        services.fail(job, error=_("The job's process crashed (%(how)s).") % {"how": outcome.describe()},
                      code=outcome.error_code)
    elif reason in MESSAGES:
        seconds = knobs.stall_timeout_s if reason == StopReason.STALLED else knobs.wall_clock_cap_s
        services.fail(job, error=MESSAGES[reason] % {"s": seconds}, code=str(reason))
    if policy.cleanup is not None:
        # A pause keeps what the job made so far (a partial download) for the resume.
        policy.cleanup(job, reason=str(reason))
