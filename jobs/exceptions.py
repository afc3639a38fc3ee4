"""One class per failure of the engine, each with the sentence a caller needs."""

import math

from django.tasks.exceptions import InvalidTask
from django.utils.translation import gettext as _


class JobError(Exception):
    """Base class of the engine's errors."""


class UnknownKind(JobError):
    """No handler is registered under this kind name; register it with @jobs.kind first."""


class InvalidPayload(JobError, ValueError):
    """The payload cannot be stored: it must be JSON-serialisable, finite, without NUL characters, and small."""


class InvalidTaskArguments(InvalidPayload, InvalidTask, TypeError):
    """A `@task`'s arguments cannot be stored: pass JSON values (str, int, float, bool, None, lists, dicts)."""

    # TypeError is what Django documents for enqueue() and aenqueue(); the
    # other bases keep working the callers that caught what this backend
    # raised before (InvalidTask) or what the engine raises for a payload.


class InvalidPriority(JobError, ValueError):
    """Priorities are whole numbers from -100 to 100 (higher runs first)."""


class TransportUnavailable(JobError):
    """The Redis that carries this kind's jobs to the CV fleet does not answer; nothing was queued.

    Try again once it is back; `queue` names the queue whose transport is down.
    """

    # Also the error code of a job Redis sent back to the queue, which pages read.
    code = "redis_unavailable"

    def __init__(self, message="", *, queue, detail=""):
        super().__init__(message)
        self.queue = queue
        self.detail = detail


class IllegalTransition(JobError):
    """The job is not in a state that allows this action (it changed meanwhile, or never could)."""


# Raised by handlers to say what happens next -------------------------------


class Retry(JobError):
    """Run the job again after `delay_s` (spends an attempt; fails once attempts run out)."""

    def __init__(self, message="", *, delay_s=None, code="retry"):
        super().__init__(message)
        self.delay_s = delay_s
        self.code = code


class Snooze(JobError):
    """Run the job again `seconds` from now without spending an attempt (up to JOBS_MAX_SNOOZES times).

    For "not now" rather than "this failed": a busy upstream that said when to
    come back. A bad number of seconds (negative, NaN, infinite, not a number)
    is a ValueError raised here, which fails the attempt that asked for it.
    """

    def __init__(self, seconds, message="", *, code="snoozed"):
        self.seconds = snooze_seconds(seconds)
        super().__init__(message)
        self.code = code


def snooze_seconds(value):
    """`value` as a finite, non-negative number of seconds, or ValueError saying what was wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(_("A snooze takes a number of seconds, not %(value)r.") % {"value": value})
    try:
        seconds = float(value)
    except OverflowError:  # an int past float's range
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(_("A snooze takes a finite number of seconds from 0 up, not %(value)r.")
                         % {"value": value})
    return seconds


class Fail(JobError):
    """Fail the job now, without retrying: the error is permanent."""

    def __init__(self, message="", *, code="failed"):
        super().__init__(message)
        self.code = code


class LeaseLost(JobError):
    """This attempt no longer holds the job's lease (it was rescued, or stopped); nothing was written."""


class Stopped(JobError):
    """Raised inside a handler when `ctx.should_stop()` is true and it chooses to unwind."""


class JobCancelled(JobError):
    """The job was cancelled before it finished (how a cancel reads in Django's TaskResult)."""
