"""Recovery: what dead workers and odd rows leave behind, taken back by whichever worker notices.

Every runworker reaps every JOBS_RESCUE_INTERVAL_SECONDS, so any survivor
recovers the fleet; nothing assumes it is the only worker, and nothing is
taken back at start-up on a guess (a worker on another machine may be
running it):

- `rescue_expired`: a RUNNING job whose lease expired ran on a worker that
  stopped answering; it goes through jobs/engine/outcome.py as EXPIRED (READY after
  the kind's backoff, FAILED once its attempts are spent, or the cancel or
  pause asked of it meanwhile);
- `mark_dead_workers`: workers silent past JOBS_WORKER_DEAD_AFTER_SECONDS
  are marked stopped, so pages stop counting them;
- `fail_unserved`: READY jobs of a kind no live worker serves fail after
  JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS (a rolling deploy waits that long),
  looked for every hundredth of that (`unserved_every_s`): the search reads
  every READY row, 0.2 s at a million;
- `limits.unpark_stranded`: parked jobs behind keys that have room again;
- `limits.unpark_due_rates`: jobs waiting for a rate window that opened
  (the worker that parked them looks then itself; this covers a dead one);
- `dependencies.decide_stranded`: dependents whose parents have all ended
  (each parent's final transition decides them; this covers a row edited by hand).
"""

import logging
from datetime import timedelta

from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import conf
from jobs.engine import dependencies, limits, outcome, queries, transitions
from jobs.models import Job, JobStatus, Outcome, Worker

log = logging.getLogger("jobs.reaper")  # its name before the move: logging configs name it

BATCH = 500  # jobs looked at per kind of recovery and round


def reap(*, unserved=True):
    """One round of recovery; returns the ids of the jobs rescued from expired leases.
    `unserved`: this round also fails the jobs no worker serves (see unserved_every_s)."""
    rescued = rescue_expired()
    mark_dead_workers()
    if unserved:
        fail_unserved(served_kinds())
    limits.unpark_stranded()
    limits.unpark_due_rates()
    dependencies.decide_stranded(transitions.cancel_dependent)
    return rescued


def rescue_expired(limit=BATCH):
    """RUNNING jobs whose lease expired: recorded as EXPIRED, the attempt their worker began spent.

    Only an *expired* lease is taken: a live worker renews its leases, so its
    jobs are never touched, and the guard re-checks the expiry in the UPDATE
    itself. A job that kills its worker cannot loop forever: its attempts run out.
    """
    expired = list(Job.objects.filter(status=JobStatus.RUNNING, lease_expires_at__lt=queries.Come())[:limit])
    message = _("The worker running this job stopped answering; its lease expired.")
    return [job.pk for job in expired
            if outcome.record(job, Outcome.EXPIRED, error=message, code="lease_expired",
                              expired=True)]


def mark_dead_workers():
    cutoff = timezone.now() - timedelta(seconds=conf.JOBS_WORKER_DEAD_AFTER_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__lt=cutoff).update(
        stopped_at=Now())


def served_kinds():
    """Kinds some worker not yet marked dead serves."""
    served = set()
    for kinds in Worker.objects.filter(stopped_at__isnull=True).values_list("kinds", flat=True):
        served.update(kinds if isinstance(kinds, list) else [])
    return served


def unserved_every_s():
    """How often a worker looks for jobs no worker serves: a hundredth of the time they are
    given (a day's wait ends up to 15 minutes late), never more often than it reaps. No index
    leads by kind, so each look reads every READY row, however deep the backlog."""
    return max(conf.JOBS_RESCUE_INTERVAL_SECONDS, conf.JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS / 100)


def fail_unserved(served, limit=BATCH):
    """READY jobs of a kind no live worker serves fail after JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS."""
    cutoff = queries.Come() - timedelta(seconds=conf.JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS)
    stale = Job.objects.filter(status=JobStatus.READY, enqueued_at__lt=cutoff).exclude(kind__in=served)
    message = _("No worker serves this kind of job; deploy a worker that registers it, then retry.")
    return sum(transitions.fail_unserved(job, reason=message) for job in stale[:limit])
