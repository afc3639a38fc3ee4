"""How an attempt ends: one rule for every execution mode, the watchdog and the reaper.

Whoever sees an attempt end — the inline executor, a process-mode child or
its supervising parent, the CV monitor, the timeout watchdog, the reaper —
only translates what it saw into an `Outcome` and calls `record()`. Here,
and nowhere else, it is decided where the job goes next:

    outcome     the job goes to                                   its attempt
    succeeded   SUCCESSFUL                                        counts
    retry       READY after a delay (the handler's, else the      spent
    timeout     kind's backoff) while attempts remain,
    stalled     else FAILED
    crashed
    expired     (the reaper: its worker stopped answering; a cancel or pause
                asked of it meanwhile is applied instead)
    failed      FAILED                                            spent
    snoozed     READY after the delay asked, up to JOBS_MAX_SNOOZES   given back
                times, then FAILED (snoozed_too_often)
    requeued    READY (a worker shutting down, a dead Redis)      given back
    paused      PAUSED                                            given back
    cancelled   CANCELLED                                         counts
    lease_lost  nothing: another attempt may own the job now      -

Each transition is one guarded UPDATE (jobs/engine/transitions.py), noted once
(jobs/engine/history.py: a JobEvent and a log line). Then the kind's `cleanup(job,
outcome=, final=)` lets go of what the attempt held outside the queue, once
per attempt: by whoever's transition took the job. A writer whose guard
matched nothing does not clean up, since the one that moved the job did (a
rescue), or the attempt is still running (a worker that renewed its lease
in time).
"""

import logging
from datetime import timedelta

from django.db.models import F
from django.db.models.functions import Now
from django.utils.translation import gettext as _

from jobs import conf
from jobs.engine import registry, transitions
from jobs.exceptions import snooze_seconds
from jobs.models import FINISHED_STATUSES, JobStatus, Outcome

log = logging.getLogger("jobs.outcome")  # its name before the move: logging configs name it

# Outcomes that spend the attempt on a failure, and go again while attempts remain.
RETRYING = {Outcome.RETRY, Outcome.TIMEOUT, Outcome.STALLED, Outcome.CRASHED, Outcome.EXPIRED}
# Stop requests a worker acts on (Job.stop_requested, ctx.stop_reason): all are Outcomes.
STOPS = {Outcome.CANCELLED, Outcome.PAUSED, Outcome.REQUEUED, Outcome.LEASE_LOST, Outcome.TIMEOUT}


def record(job, outcome, *, error="", code=None, exc=None, delay_s=None, result=None,
           expired=False):
    """Record that this attempt of `job` ended with `outcome`; True when the job's row changed.

    `error` is the sentence for people, `code` the machine's word for it
    (default: the outcome), `exc` the exception with its traceback, `delay_s`
    when to run again (retry, snooze, requeue). `expired` is the reaper's
    rescue: its guard also wants the lease run out.
    """
    outcome = Outcome(outcome)
    if outcome == Outcome.SUCCEEDED:
        changed = bool(transitions.complete_many([(job, result)]))
        final = True
    elif outcome == Outcome.LEASE_LOST:
        log.warning("job %s (%s) lost its lease; this attempt's outcome is discarded", job.pk,
                    job.kind, extra={"job_id": job.pk, "job_kind": job.kind, "event": str(outcome)})
        changed, final = False, False
    else:
        outcome, status, fields, data = _transition(job, outcome, error=str(error or ""),
                                                    code=code or str(outcome), exc=exc,
                                                    delay_s=delay_s)
        level = logging.ERROR if status == JobStatus.FAILED else (
            logging.WARNING if outcome in RETRYING else logging.INFO)
        changed = transitions.leave_running(job, _event(outcome, status), status=status,
                                         expired=expired, reason=fields.get("error") or error,
                                         level=level, exc=exc, data=data,
                                         retried=outcome in RETRYING and status == JobStatus.READY,
                                         **fields)
        final = changed and status in FINISHED_STATUSES
    if changed:
        _clean_up(job, outcome, final=final)
    return changed


def record_successes(jobs_results):
    """`record(job, SUCCEEDED, result=...)` for a batch, in one statement; returns the ids that stuck."""
    done = transitions.complete_many(jobs_results)
    for job, _result in jobs_results:
        if job.pk in done:
            _clean_up(job, Outcome.SUCCEEDED, final=True)
    return done


def _event(outcome, status):
    """The word noted for the transition: a retry that ran out of attempts is a failure."""
    if outcome == Outcome.RETRY and status == JobStatus.FAILED:
        return Outcome.FAILED
    return outcome


def _transition(job, outcome, *, error, code, exc, delay_s):
    """(outcome, status, the row's changes, the event's data) for an attempt that ended so."""
    data = {"code": code}
    if outcome == Outcome.EXPIRED and job.stop_requested in (Outcome.CANCELLED, Outcome.PAUSED):
        # Its worker died before it could act on a cancel or pause: apply that now.
        outcome = Outcome(job.stop_requested)
        code = str(outcome)
        data = {"code": code, "expired": True}
    if outcome == Outcome.CANCELLED:
        return outcome, JobStatus.CANCELLED, {"finished_at": Now(), "error": error,
                                              "error_code": "cancelled"}, data
    if outcome == Outcome.PAUSED:
        # A pause spends no attempt: a resume starts it again.
        return outcome, JobStatus.PAUSED, {"attempts": F("attempts") - 1, "error": error,
                                           "error_code": "paused"}, data
    if outcome == Outcome.REQUEUED:
        # With a code of its own (a dead Redis), pages say why the job waits.
        noted = {"error": error, "error_code": code} if code != str(outcome) else {}
        return outcome, JobStatus.READY, {"attempts": F("attempts") - 1,
                                          "run_after": _later(delay_s or 0), **noted}, data
    if outcome == Outcome.SNOOZED and job.snoozes < conf.JOBS_MAX_SNOOZES:
        # `job.snoozes` was read at claim time; only the lease holder changes it.
        delay = min(snooze_seconds(delay_s or 0), conf.JOBS_SNOOZE_MAX_SECONDS)
        error = error or _("Snoozed: asked to run again later.")
        return outcome, JobStatus.READY, {
            "attempts": F("attempts") - 1, "snoozes": F("snoozes") + 1, "run_after": _later(delay),
            "error": error, "error_code": code,
        }, {**data, "seconds": delay, "snoozes": job.snoozes + 1}
    if outcome == Outcome.SNOOZED:
        error = _("Asked to snooze again after %(n)d snoozes, the most a job may take "
                  "(JOBS_MAX_SNOOZES); given up.") % {"n": job.snoozes}
        code = "snoozed_too_often"
        outcome, data = Outcome.FAILED, {"code": code}
    errors = transitions.error_entry(job, error, code, exc)
    if outcome in RETRYING and job.attempts < job.max_attempts:
        delay = registry.policy(job.kind).backoff_s(job.attempts) if delay_s is None else delay_s
        return outcome, JobStatus.READY, {"run_after": _later(delay), "error": error,
                                          "error_code": code, "errors": errors}, \
            {**data, "delay_s": round(delay, 3)}
    return outcome, JobStatus.FAILED, {"finished_at": Now(), "error": error, "error_code": code,
                                       "errors": errors}, data


def _later(seconds):
    return Now() + timedelta(seconds=seconds)


def _clean_up(job, outcome, *, final):
    """The kind's cleanup for an attempt that ended; its failure is logged, never raised."""
    cleanup = registry.policy(job.kind).cleanup
    if cleanup is None:
        return
    try:
        cleanup(job, outcome=outcome, final=final)  # `job` still carries the attempt's lease token
    except Exception:  # noqa: BLE001 - the outcome itself is recorded and committed
        log.exception("cleanup of job %s after %s failed", job.pk, outcome)
