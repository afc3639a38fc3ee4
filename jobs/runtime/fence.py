"""The worker's own clock on its leases: a job is stopped before its lease can lapse.

The database says who holds a job, by its lease. A worker cut off from it (a
dropped route, a frozen server, a middlebox holding the connection open)
cannot hear that the lease ran out and another worker took the job over, so
it must not wait to be told. For each job it holds, it keeps the moment (its
monotonic clock) it *sent* the last renewal of the lease that succeeded, or
the claim that took it; the database set the lease's end after that moment,
so, clocks advancing at one rate, the lease cannot lapse before
`sent + JOBS_LEASE_SECONDS`. A thread that does no I/O then acts, whatever
the database or the network is doing:

    sent + lease - margin      the attempt is asked to stop (lease_lost); a
                               process-mode child's group gets TERM, and KILL
                               half the margin later
    sent + lease - margin / 4  an inline handler still running: the worker
                               ends itself (exit code 75), since a thread
                               cannot be killed; its process manager starts
                               it again
    sent + lease               the earliest the lease can lapse

The margin is JOBS_FENCE_SECONDS, at most a fifth of the lease (a heartbeat
must fit in what is left: jobs.W005). A fenced attempt's lease is no longer
renewed, even if the database answers again in time: the attempt is being
stopped, and the reaper gives its job to the next claim once the lease ends.
What the attempt would still write is refused by its lease token anyway.
"""

import logging
import os
import sys
import threading
import time

from jobs import conf
from jobs.models import Outcome

log = logging.getLogger("jobs.worker")

TICK_S = 0.05  # how often the deadlines are looked at
EXIT_CODE = 75  # EX_TEMPFAIL: the worker ended itself to fence a handler that would not stop


def margin_s():
    """How long before its lease can lapse a job is stopped."""
    return min(conf.JOBS_FENCE_SECONDS, conf.JOBS_LEASE_SECONDS / 5)


class Fence:
    """Watches the deadlines of a Worker's running jobs from a thread of its own."""

    def __init__(self, worker):
        self.worker = worker
        self.cut_off_since = None  # when the first job was fenced in this episode

    def start(self):
        thread = threading.Thread(target=self.loop, name="haulage-fence", daemon=True)
        thread.start()
        return thread

    def loop(self):
        while not self.worker.exited.wait(TICK_S):
            self.check(time.monotonic())

    def check(self, now):
        """Act on every deadline passed at `now`; returns the jobs fenced by this look."""
        lease_s, margin = conf.JOBS_LEASE_SECONDS, margin_s()
        with self.worker.lock:
            held = [r for r in self.worker.running.values() if not r.slot_freed]
        fenced = []
        for entry in held:
            lapses_at = entry.renewed_at + lease_s
            if entry.fenced_at is None and now >= lapses_at - margin:
                entry.fenced_at = now
                fenced.append(entry)
                entry.ctx.request_stop(Outcome.LEASE_LOST)
                if entry.child is not None:
                    # The executor's watch would wait its kill grace; the lease will not.
                    threading.Thread(target=entry.child.stop, name="haulage-fence-stop",
                                     args=(Outcome.LEASE_LOST, margin / 2), daemon=True).start()
            elif (entry.fenced_at is not None and entry.child is None
                  and now >= lapses_at - margin / 4):
                self.end_worker(entry, lapses_at - now)
        if fenced:
            self.report(fenced, now, lease_s)
        return fenced

    def report(self, fenced, now, lease_s):
        """One line per episode, not per job or per retry."""
        if self.cut_off_since is None:
            self.cut_off_since = min(entry.renewed_at for entry in fenced)
        lapse_in = min(entry.renewed_at + lease_s for entry in fenced) - now
        log.error("no lease renewed for %.1f s (the database is unreachable or too slow): "
                  "stopping %d job(s) whose leases lapse in %.1f s", now - self.cut_off_since,
                  len(fenced), lapse_in)

    def renewed(self, sent):
        """A renewal sent at `sent` succeeded: say once that the episode is over."""
        if self.cut_off_since is not None:
            log.warning("leases renewed again, %.1f s after the last one before",
                        sent - self.cut_off_since)
            self.cut_off_since = None

    def end_worker(self, entry, lapse_in):
        log.critical("job %s's handler did not stop and its lease lapses in %.2f s: this worker "
                     "ends itself so that it never runs beside the job's next attempt",
                     entry.job.pk, lapse_in)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(EXIT_CODE)
