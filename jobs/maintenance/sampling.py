"""A sample of each queue's state per minute: depth, the oldest runnable job's age, running.

Workers take them as they beat (`take`): the first worker to see a minute
without a queue's sample counts that queue through the partial indexes and
inserts the row; the others find it and count nothing, so the fleet pays a
few indexed counts per queue per minute, whatever its size. The dashboard
charts these rows and asks the same counts once per view for "now".
"""

from django.utils import timezone

from jobs.engine import queries
from jobs.engine.rollup import minute_of
from jobs.models import CLAIMABLE, PARKED, Job, JobStatus, QueueSample
from jobs.selectors import counts

COUNT_CAP = 100_000  # jobs counted at most per queue and state: past it the chart says "100,000+"


def live_state(queues, now=None):
    """{queue: (ready, waiting, running, latency_s)} now, read only through the partial indexes.

    `ready` is claimable now; `waiting` every READY job (parked behind a
    limit or scheduled for later too), each counted up to COUNT_CAP.
    """
    now = now or timezone.now()
    latency = counts.queue_latencies(now)
    state = {}
    for queue in queues:
        claimable = Job.objects.filter(CLAIMABLE, queue=queue)
        parked = Job.objects.filter(PARKED, queue=queue)
        ready = claimable.filter(run_after__lte=now).order_by()[:COUNT_CAP].count()
        waiting = min(COUNT_CAP, claimable.order_by()[:COUNT_CAP].count()
                      + parked.order_by()[:COUNT_CAP].count())
        running = Job.objects.filter(queue=queue, status=JobStatus.RUNNING).count()
        state[queue] = (ready, waiting, running, round(latency.get(queue, 0.0), 3))
    return state


def take(queues, now=None):
    """Sample the queues that have no sample for this minute yet; returns how many were taken."""
    now = now or timezone.now()
    minute = minute_of(now)
    done = set(QueueSample.objects.filter(minute=minute, queue__in=queues)
               .values_list("queue", flat=True))
    missing = sorted(set(queues) - done)
    if not missing:
        return 0
    queries.insert_samples([(queue, minute, *numbers)
                            for queue, numbers in live_state(missing, now).items()])
    return len(missing)


def series(since, *, queue=None):
    """{minute: (ready, waiting, running, latency_s)} from `since`: one queue's, or all queues'
    summed (the latency: the longest)."""
    rows = QueueSample.objects.filter(minute__gte=minute_of(since))
    if queue:
        rows = rows.filter(queue=queue)
    result = {}
    for minute, ready, waiting, running, latency in rows.order_by("minute").values_list(
        "minute", "ready", "waiting", "running", "latency_s"
    ):
        was = result.get(minute, (0, 0, 0, 0.0))
        result[minute] = (was[0] + ready, was[1] + waiting, was[2] + running, max(was[3], latency))
    return result


def prune(before):
    deleted, _by_model = QueueSample.objects.filter(minute__lt=before).delete()
    return deleted
