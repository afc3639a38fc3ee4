"""One class per failure of the engine, each with the sentence a caller needs."""

from django.tasks.exceptions import InvalidTask


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


class IllegalTransition(JobError):
    """The job is not in a state that allows this action (it changed meanwhile, or never could)."""


# Raised by handlers to say what happens next -------------------------------


class Retry(JobError):
    """Run the job again after `delay_s` (spends an attempt; fails once attempts run out)."""

    def __init__(self, message="", *, delay_s=None, code="retry"):
        super().__init__(message)
        self.delay_s = delay_s
        self.code = code


class Fail(JobError):
    """Fail the job now, without retrying: the error is permanent."""

    def __init__(self, message="", *, code="failed"):
        super().__init__(message)
        self.code = code


class Stopped(JobError):
    """Raised inside a handler when `ctx.should_stop()` is true and it chooses to unwind."""


class JobCancelled(JobError):
    """The job was cancelled before it finished (how a cancel reads in Django's TaskResult)."""
