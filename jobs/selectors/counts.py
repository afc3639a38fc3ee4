"""Counts of the queue for pages, the admin, `/metrics` and the per-minute samples.

What each state holds, how long the oldest runnable job has waited, and the
flow over a window from the per-minute rollup. Cheap at any size: above
EXACT_COUNT_ROWS rows only the states with a partial index are counted, and
the flow is read from the rollup, never from a scan of all history.
"""

from django.db.models import Count, Q
from django.utils import timezone

from jobs.engine import queries, rollup
from jobs.models import CLAIMABLE, FINISHED_STATUSES, PARKED, Job, JobStatus

# Below this many rows every state is counted exactly; above it only the
# states with a partial index are (a COUNT over millions of finished rows
# takes seconds on every page refresh and scrape).
EXACT_COUNT_ROWS = 200_000


# --- Counts ----------------------------------------------------------------


def table_rows_estimate():
    """About how many rows jobs_job holds, without counting them when the database knows."""
    if queries.is_postgres():
        rows = queries.table_rows_estimate()
        if rows >= 0:
            return rows
    return Job.objects.order_by()[: EXACT_COUNT_ROWS + 1].count()  # stops at the threshold


def _grouped(queryset):
    return queryset.order_by().values_list("queue", "status").annotate(n=Count("pk"))


def state_counts(queues=()):
    """{queue: {status: (count or None, exact)}} for every status of each queue.

    `queues` adds queues that have no jobs (they are reported with zeros).
    """
    names = set(queues)
    counts = {}
    if table_rows_estimate() <= EXACT_COUNT_ROWS:
        for queue, status, n in _grouped(Job.objects.all()):
            counts[(queue, status)] = (n, True)
        names.update(queue for queue, _status in counts)
        return {q: {s: counts.get((q, s), (0, True)) for s in JobStatus.values} for q in sorted(names)}
    # Each query below matches one partial index's predicate exactly, so it
    # reads only the claimable, parked or running rows.
    live = [
        Job.objects.filter(CLAIMABLE),
        Job.objects.filter(PARKED),
        Job.objects.filter(status=JobStatus.RUNNING),
    ]
    for queryset in live:
        for queue, status, n in _grouped(queryset):
            counts[(queue, status)] = (counts.get((queue, status), (0, True))[0] + n, True)
    names.update(queue for queue, _status in counts)
    result = {}
    for queue in sorted(names):
        row = {}
        for status in JobStatus.values:
            if status in (JobStatus.READY, JobStatus.RUNNING):
                row[status] = counts.get((queue, status), (0, True))
            elif queries.is_postgres():
                row[status] = (queries.rows_estimate(queue, status), False)
            else:
                row[status] = (None, False)
        result[queue] = row
    return result


def queue_latencies(now=None):
    """{queue: seconds the longest-waiting runnable job has waited}.

    Counted from `run_after` (when it became runnable) over the claimable set:
    jobs parked behind a per-user or per-asset limit wait by design, and
    scheduled retries by choice, so neither reads as a slow queue.
    """
    now = now or timezone.now()
    return {queue: max(0.0, (now - earliest).total_seconds())
            for queue, earliest in queries.earliest_waiting().items() if earliest <= now}


# --- Flow over the window ---------------------------------------------------


def recent_finished(since):
    """{(queue, kind): Totals} from the minute of `since` on, from the rollup."""
    return rollup.totals(since, by=("queue", "kind"))


def recent_claims(since):
    """{kind: attempts started since}, by each job's latest start (a job started twice counts once).

    Read from the states whose rows are indexed (running, finished in the
    window, queued again), never from a scan of all history.
    """
    recent = Q(status=JobStatus.RUNNING) | Q(status__in=FINISHED_STATUSES, finished_at__gte=since)
    recent |= CLAIMABLE | PARKED
    rows = Job.objects.filter(recent, started_at__gte=since).order_by().values_list("kind")
    return dict(rows.annotate(n=Count("pk")))


def recent_failures(since):
    """{kind: jobs that ended FAILED since} (attempts that will be retried are retries)."""
    return {kind: t.failed for (kind,), t in rollup.totals(since, by=("kind",)).items() if t.failed}


def recent_retries(since):
    """{kind: attempts since that failed and were scheduled again, or whose lease expired}."""
    return {kind: t.retried for (kind,), t in rollup.totals(since, by=("kind",)).items() if t.retried}
