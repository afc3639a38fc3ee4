"""What is written about each transition of a job: one JobEvent row and one log record.

Every change of a job's state, and every staff action on a job, calls `note()`
once, inside the transaction that made it: the event commits with the change
or not at all, and the log record goes out only once it has committed (a
rolled-back change says nothing). A job that ends FAILED is logged at ERROR,
with its traceback when there is one, so Django's AdminEmailHandler or an
error tracker's logging integration hears of it; an attempt that will be
tried again, WARNING; everything else, INFO.

Log records carry `job_id`, `job_kind`, `queue`, `event` and `attempt` as
extra fields for structured log handlers.
"""

import logging

from django.db import transaction

from jobs.engine import queries
from jobs.models import JobEvent

log = logging.getLogger("jobs.history")


def note(job, event, *, actor=None, reason="", status=None, level=logging.INFO, exc=None,
         attempt=None, **data):
    """Record that `event` (an Outcome or an Action) happened to `job`, now in this transaction.

    `status` is the state the job went to, when the event moved it; `data`
    goes on the event as it is (JSON).
    """
    attempt = job.attempts if attempt is None else attempt
    if status is not None:
        data["status"] = str(status)
    JobEvent.objects.create(job_id=job.pk, kind=event, actor=actor, reason=str(reason or ""),
                            attempt=attempt, data=data)
    _log_on_commit(job, event, reason=reason, status=status, level=level, exc=exc, attempt=attempt,
                   actor=actor, code=data.get("code"))


def note_many(jobs, event, *, status):
    """`note()` for a batch that one statement moved together (completions), in one named
    INSERT: building and compiling a model per event cost more than the completion itself."""
    queries.insert_events(jobs, str(event), {"status": str(status)})
    log_many(jobs, event, status=status)


def log_many(jobs, event, *, status):
    """The log records of a batch whose events one statement wrote (see note_many)."""
    for job in jobs:
        _log_on_commit(job, event, status=status, attempt=job.attempts)


def _log_on_commit(job, event, *, reason="", status=None, level=logging.INFO, exc=None, attempt=0,
                   actor=None, code=None):
    if not log.isEnabledFor(level):
        return
    words = [f"job {job.pk} ({job.kind}, attempt {attempt}/{job.max_attempts}) {event}"]
    if status is not None:
        words.append(f"-> {status}")
    if actor is not None:
        words.append(f"by {actor}")
    if code and code != str(event):
        words.append(f"[{code}]")
    message = " ".join(words) + (f": {reason}" if reason else "")
    extra = {"job_id": job.pk, "job_kind": job.kind, "queue": job.queue, "event": str(event),
             "attempt": attempt}
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    transaction.on_commit(lambda: log.log(level, "%s", message, exc_info=exc_info, extra=extra))
