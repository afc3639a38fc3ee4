"""Running one claimed job's handler in this process, and saying how its attempt ended.

Used by the inline mode (a worker thread) and by a process-mode child: both
call the kind's handler as `handler(ctx, payload)`, then `settle()`
translates what happened into an Outcome for jobs/engine/outcome.py.
"""

import logging

from django.db import close_old_connections, connection
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from jobs.engine import outcome, registry
from jobs.exceptions import Fail, Retry, Snooze, Stopped, UnknownKind
from jobs.models import Outcome

log = logging.getLogger("jobs.execution")  # its name before the move: logging configs name it

# What a stop the engine asked for reads as on the job, where it says more than its name.
STOP_MESSAGES = {
    Outcome.TIMEOUT: gettext_lazy("The job ran past its time limit and was stopped."),
    Outcome.REQUEUED: gettext_lazy("The worker shut down; the job was handed back to the queue."),
}


def run_handler(job, ctx):
    """Call the kind's handler; return ("ok", result) or ("error", exception)."""
    try:
        spec = registry.get(job.kind)
    except UnknownKind as exc:
        return "error", Fail(str(exc), code="unknown_kind")
    try:
        return "ok", spec.handler(ctx, job.payload)
    except BaseException as exc:  # noqa: BLE001 - every handler failure is recorded, never raised
        # BaseException too: a `sys.exit()` or a KeyboardInterrupt raised in a
        # handler is that job failing, not the worker stopping. A worker's
        # SIGTERM/SIGINT only set events (signals reach no executor thread),
        # and a stop the engine asked for wins in settle() whatever the handler
        # did. Let through, it would end the executor thread with the job still
        # RUNNING under a lease the heartbeat renews for ever. (A child process
        # is stopped by signals too: see jobs/runtime/process/main.py.)
        return "error", exc


def settle(job, ctx, result, value, *, complete=None):
    """Record how the attempt ended: the stop the engine asked for, else what the handler did.

    `complete(job, result)` is how a success is written (the worker batches
    them); by default `outcome.record` at once.
    """
    stop = ctx.stop_reason
    if stop == Outcome.TIMEOUT:
        return  # the watchdog recorded it when the time ran out
    if stop is not None:
        outcome.record(job, stop, error=STOP_MESSAGES.get(stop, ""))
    elif result == "ok":
        ctx.flush_progress()
        if complete is not None:
            complete(job, value)
        else:
            outcome.record(job, Outcome.SUCCEEDED, result=value)
    else:
        ended, options = failure(value)
        outcome.record(job, ended, **options)


def failure(exc):
    """(outcome, options for outcome.record) for an exception a handler raised."""
    if isinstance(exc, Snooze):
        return Outcome.SNOOZED, {"delay_s": exc.seconds, "error": str(exc), "code": exc.code}
    if isinstance(exc, Retry):
        return Outcome.RETRY, {"error": str(exc) or _("Retry requested."), "code": exc.code,
                               "delay_s": exc.delay_s, "exc": exc}
    if isinstance(exc, Fail):
        return Outcome.FAILED, {"error": str(exc), "code": exc.code, "exc": exc}
    if isinstance(exc, Stopped):
        return Outcome.RETRY, {"error": str(exc) or _("The job stopped itself."), "code": "stopped",
                               "exc": exc}
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return Outcome.RETRY, {"error": message, "code": "error", "exc": exc}


def guarded(fn, *args, **kwargs):
    """Run a database write from a worker thread, surviving a broken connection.

    A failed write loses nothing: the job keeps its lease until it expires
    and the reaper hands it to another attempt.
    """
    try:
        return fn(*args, **kwargs)
    except Exception:  # noqa: BLE001
        log.exception("database write failed in %s", getattr(fn, "__name__", fn))
        connection.close_if_unusable_or_obsolete()
        close_old_connections()
        return None
