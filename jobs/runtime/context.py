"""What a handler receives: its job, progress reporting, and whether to stop."""

import threading
import time
from contextlib import contextmanager

from django.db import transaction
from django.utils.translation import gettext as _

from jobs import conf, services
from jobs.exceptions import LeaseLost, Snooze
from jobs.models import Outcome
from jobs.runtime.process import child as childside


class JobContext:
    """Passed to every handler as its first argument.

    `progress()` writes at most about once per JOBS_PROGRESS_INTERVAL_SECONDS
    (the latest values win; the final one is flushed by the engine), and
    `should_stop()` turns true when the job was cancelled or paused, its lease
    was lost, it ran past its timeout, or the worker is shutting down. A
    handler that sees it should return or raise promptly; what is recorded
    then is `stop_reason` (an Outcome), not what the handler returned.
    """

    def __init__(self, job, *, worker_id=""):
        self.job = job
        self.worker_id = worker_id
        self.stop_reason = None  # an Outcome: cancelled, paused, requeued, lease_lost or timeout
        self._stop = threading.Event()
        self._last_write = 0.0
        self._pending = None
        self.started_monotonic = time.monotonic()

    @property
    def attempt(self):
        return self.job.attempts

    @property
    def payload(self):
        return self.job.payload

    def alive(self):
        """A sign of life without progress, for a long quiet step (a no-op outside a child process)."""
        childside.alive()

    def keepalive(self, every_s=1.0, *, until=None):
        """Signs of life from a thread during a step known to be healthy (jobs.runtime.process.child.keepalive)."""
        return childside.keepalive(every_s, until=until)

    def progress(self, fraction=None, *, phase=None, message=None, force=False):
        childside.alive()
        self._pending = {"fraction": fraction, "phase": phase, "message": message}
        now = time.monotonic()
        if force or now - self._last_write >= conf.JOBS_PROGRESS_INTERVAL_SECONDS:
            self.flush_progress()

    def flush_progress(self):
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        self._last_write = time.monotonic()
        if not services.report_progress(self.job, **pending):
            # The guarded write matched nothing: another worker or a person owns the job now.
            self.request_stop(Outcome.LEASE_LOST)

    def should_stop(self):
        return self._stop.is_set()

    def request_stop(self, reason):
        """Ask the handler to stop, for `reason` (an Outcome); the first reason asked wins."""
        if self.stop_reason is None:
            self.stop_reason = Outcome(reason)
        self._stop.set()

    def snooze(self, seconds, message=""):
        """Stop here and run the job again `seconds` from now, without spending an attempt.

        Raises `Snooze` (so nothing after this line runs); a bad number of
        seconds raises ValueError, which fails this attempt.
        """
        raise Snooze(seconds, message)

    @contextmanager
    def fenced(self):
        """A transaction for the handler's own writes, made only while this attempt holds the lease.

        The job's row stays locked to the end of the block, so a rescue or a
        second attempt cannot take it in between. When the lease has moved on,
        raises LeaseLost before the block runs (the engine then discards the
        attempt's outcome): a stale worker cannot overwrite what the next one wrote.
        """
        with transaction.atomic():
            if not services.lock_lease(self.job):
                self.request_stop(Outcome.LEASE_LOST)
                raise LeaseLost(_("This attempt no longer holds the job's lease; nothing was written."))
            yield

    def read_data(self, fingerprint):
        """Say the data this attempt works from has `fingerprint` (a job enqueued with one):
        the same data asked for again while it runs then runs nothing more. False when the
        lease has moved on."""
        return services.note_read(self.job, fingerprint)

    def wait(self, seconds):
        """Sleep that wakes early when the job should stop; returns should_stop()."""
        return self._stop.wait(seconds)
