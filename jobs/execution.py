"""Running one claimed job in this process and recording how it ended."""

import logging

from django.db import close_old_connections, connection
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from jobs import registry, services
from jobs.exceptions import Fail, Retry, Snooze, Stopped, UnknownKind

log = logging.getLogger(__name__)

# What a stop request turns into once the handler has returned.
STOP_MESSAGES = {
    "timeout": gettext_lazy("The job ran past its time limit and was stopped."),
    "shutdown": gettext_lazy("The worker shut down; the job was handed back to the queue."),
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
        # is stopped by signals too: see jobs/child.py.)
        return "error", exc


def settle(job, ctx, outcome, value, *, complete=None):
    """Record the end of an attempt according to the stop request or the handler's outcome.

    `complete(job, result)` is how a success is written (the worker batches
    them); by default one guarded UPDATE.
    """
    reason = ctx.stop_reason
    if reason in ("cancel", "pause"):
        services.acknowledge_stop(job)
    elif reason == "shutdown":
        services.requeue(job, reason=STOP_MESSAGES["shutdown"])
    elif reason == "timeout":
        pass  # the watchdog already failed it when the time ran out
    elif reason == "lease_lost":
        log.info("job %s lost its lease; its outcome is discarded", job.pk)
    elif outcome == "ok":
        ctx.flush_progress()
        (complete or services.complete)(job, value)
    else:
        _record_failure(job, value)


def _record_failure(job, exc):
    if isinstance(exc, Snooze):
        services.snooze(job, delay_s=exc.seconds, reason=str(exc), code=exc.code)
    elif isinstance(exc, Retry):
        services.fail(job, error=str(exc) or _("Retry requested."), code=exc.code, delay_s=exc.delay_s, exc=exc)
    elif isinstance(exc, Fail):
        services.fail(job, error=str(exc), code=exc.code, retry=False, exc=exc)
    elif isinstance(exc, Stopped):
        services.fail(job, error=str(exc) or _("The job stopped itself."), code="stopped", exc=exc)
    else:
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        services.fail(job, error=message, code="error", exc=exc)


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
