"""The `process` execution mode: the job runs in a supervised child process.

The worker's thread for the job spawns `python -m jobs.runtime.process.main <id> <token>` in
its own process group and watches it (jobs/runtime/process/parent.py). The child records
progress and how its attempt ended itself, guarded by the lease token; the
parent steps in only when the child cannot: a cancel or pause, no sign of
life for the stall timeout, the wall-clock cap, a lost lease, the worker
shutting down, or a crash. Each becomes an Outcome for jobs/engine/outcome.py.
"""

import logging
import sys

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from jobs import conf
from jobs.engine import outcome, registry
from jobs.models import Outcome
from jobs.runtime.execution import STOP_MESSAGES
from jobs.runtime.process.child import Limits
from jobs.runtime.process.parent import Child, StopReason, WatchSettings, python_env, watch
from jobs.services import held

log = logging.getLogger("jobs.process_mode")  # its name before the move: logging configs name it

MESSAGES = {
    Outcome.STALLED: gettext_lazy("The job stopped showing signs of life for %(s)d s and was stopped."),
    Outcome.TIMEOUT: gettext_lazy("The job ran past its time limit of %(s)d s and was stopped."),
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
                [sys.executable, "-m", "jobs.runtime.process.main", str(job.pk), str(job.lease_token)],
                env=python_env(),
                marker=f"job-{job.pk}-{job.lease_token}",
                limits=Limits(**policy.options.get("limits", {})),
            )
        except OSError as exc:
            outcome.record(job, Outcome.RETRY, code="spawn_failed",
                           error=_("The job's process could not start: %(e)s") % {"e": exc})
            worker.free(entry)
            return
        entry.child = child
        stopped = watch(child, knobs, should_stop=lambda: ctx.stop_reason)
        try:
            record(job, stopped, knobs)
        except Exception:  # noqa: BLE001 - the lease expires and the reaper takes over
            log.exception("could not record how job %s ended", job.pk)
            worker.reset_connection()
        finally:
            worker.free(entry)

    return run


def record(job, stopped, knobs):
    """Say how the attempt ended, from what the parent knows of its child."""
    if stopped.reason == StopReason.EXITED:
        # The child recorded its own outcome; if it could not, its lease
        # says so: the job is still RUNNING under our token.
        if held(job).exists():
            outcome.record(job, Outcome.CRASHED, code="crashed",
                           error=_("The job's process exited without recording a result."))
        return
    ended = Outcome(stopped.reason)
    if ended in (Outcome.CANCELLED, Outcome.PAUSED):
        outcome.record(job, ended, error=stopped.describe())
    elif ended == Outcome.CRASHED:
        outcome.record(job, ended, code=stopped.error_code,
                       error=_("The job's process crashed (%(how)s).") % {"how": stopped.describe()})
    elif ended in MESSAGES:
        seconds = knobs.stall_timeout_s if ended == Outcome.STALLED else knobs.wall_clock_cap_s
        outcome.record(job, ended, error=MESSAGES[ended] % {"s": seconds})
    else:  # requeued (the worker is shutting down) or lease_lost
        outcome.record(job, ended, error=STOP_MESSAGES.get(ended, ""))
