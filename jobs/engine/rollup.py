"""The per-minute rollup: what finished, per queue, kind and minute, and how long it took.

Written in the transaction that gives a job its final state (and, for the
`retried` count, the one that sends an attempt back to the queue), by one
upsert: a worker killed before its commit counts nothing, and the attempt
that later finishes the job counts it once. Nothing here scans the Job
table; the dashboard and `/metrics` read these rows, which `prune` deletes
with the job history.

Durations are the last attempt's run time, kept as a count, a sum, a maximum
and a histogram over `DURATION_BOUNDS_S`; `percentile()` reads p50 and p95
from the histogram the way Prometheus' histogram_quantile does.
"""

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Max, Sum
from django.utils import timezone

from jobs.engine import queries
from jobs.models import DURATION_BOUNDS_S, DURATION_COLUMNS, JobRollup

# What a row counts; an Outcome word would not do: "failed" here means for good.
COUNTS = ("succeeded", "failed", "cancelled", "retried")


def minute_of(moment):
    return moment.replace(second=0, microsecond=0)


def bucket_of(seconds):
    """The histogram column a duration falls in."""
    for i, bound in enumerate(DURATION_BOUNDS_S):
        if seconds <= bound:
            return DURATION_COLUMNS[i]
    return DURATION_COLUMNS[-1]


def count(entries, *, now=None):
    """Add finished attempts to this minute's rows, inside the caller's transaction.

    `entries` are (job, what, took_s): `what` one of COUNTS, `took_s` the
    attempt's run time or None (a job cancelled before it ran). One statement
    for the batch; the rows are sorted so two transactions upserting the same
    rows lock them in the same order and never deadlock.
    """
    minute = minute_of(now or timezone.now())
    rows = {}
    for job, what, took_s in entries:
        row = rows.setdefault((job.queue, job.kind), dict.fromkeys(
            (*COUNTS, "took_count", "took_sum_s", "took_max_s", *DURATION_COLUMNS), 0))
        row[what] += 1
        if took_s is not None:
            took_s = max(0.0, took_s)
            row["took_count"] += 1
            row["took_sum_s"] += took_s
            row["took_max_s"] = max(row["took_max_s"], took_s)
            row[bucket_of(took_s)] += 1
    if rows:
        queries.upsert_rollup([(queue, kind, minute, row) for (queue, kind), row in sorted(rows.items())])


def timing(job, now):
    """(run time of `job`'s current attempt in seconds, its histogram bucket's index), or
    (None, None) for a job that never started: what `count` adds for a finished attempt."""
    took = took_s(job, now)
    if took is None:
        return None, None
    took = max(0.0, took)
    return took, DURATION_COLUMNS.index(bucket_of(took))


def took_s(job, now=None):
    """The run time of `job`'s current attempt (claimed at `job.started_at`), in seconds."""
    if job.started_at is None:
        return None
    return ((now or timezone.now()) - job.started_at).total_seconds()


# --- Reading ----------------------------------------------------------------------


@dataclass
class Totals:
    """Counts and durations summed over some rows (a queue, a kind, a minute, a window)."""

    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    retried: int = 0
    took_count: int = 0
    took_sum_s: float = 0.0
    took_max_s: float = 0.0
    histogram: list = field(default_factory=lambda: [0] * len(DURATION_COLUMNS))

    @property
    def finished(self):
        return self.succeeded + self.failed + self.cancelled

    @property
    def p50_s(self):
        return percentile(self.histogram, 0.5, self.took_max_s)

    @property
    def p95_s(self):
        return percentile(self.histogram, 0.95, self.took_max_s)

    @property
    def mean_s(self):
        return self.took_sum_s / self.took_count if self.took_count else None

    def cumulative(self):
        """[(upper bound, jobs that took at most that long)...], "+Inf" last, as Prometheus wants."""
        running, pairs = 0, []
        for bound, n in zip((*DURATION_BOUNDS_S, float("inf")), self.histogram, strict=True):
            running += n
            pairs.append((bound, running))
        return pairs


_SUMS = {name: Sum(name) for name in (*COUNTS, "took_count", "took_sum_s", *DURATION_COLUMNS)}


def totals(since, *, by=(), until=None, **filters):
    """{key: Totals} of rows from minute `since` (to before `until`), grouped by the fields `by`.

    `filters` narrow the rows (queue=, kind=); with no `by` the single key is ().
    """
    rows = JobRollup.objects.filter(minute__gte=minute_of(since), **filters)
    if until is not None:
        rows = rows.filter(minute__lt=until)
    if by:
        grouped = rows.order_by().values(*by).annotate(**_SUMS, took_max=Max("took_max_s"))
    else:
        grouped = [rows.aggregate(**_SUMS, took_max=Max("took_max_s"))]
    result = {}
    for row in grouped:
        if row["took_count"] is None:
            continue  # no rows at all: the aggregate of nothing
        result[tuple(row[name] for name in by)] = Totals(
            **{name: row[name] or 0 for name in (*COUNTS, "took_count", "took_sum_s")},
            took_max_s=row["took_max"] or 0.0,
            histogram=[row[name] or 0 for name in DURATION_COLUMNS],
        )
    return result


def percentile(histogram, q, max_s):
    """The q-quantile (0..1) of the durations in `histogram`, interpolated within its bucket.

    The first bucket starts at 0 and the last ends at the longest duration
    seen, so a p95 is never past the slowest job. None when nothing was timed.
    """
    total = sum(histogram)
    if not total:
        return None
    rank = q * total
    seen = 0
    lower = 0.0
    for i, n in enumerate(histogram):
        upper = DURATION_BOUNDS_S[i] if i < len(DURATION_BOUNDS_S) else max(max_s, lower)
        upper = min(upper, max_s) if max_s else upper
        if n and seen + n >= rank:
            return lower + (upper - lower) * (rank - seen) / n
        seen += n
        lower = DURATION_BOUNDS_S[i] if i < len(DURATION_BOUNDS_S) else lower
    return max_s


def per_minute(since, **filters):
    """{minute: Totals} from minute `since` on, every queue and kind summed (or those of `filters`)."""
    return {key[0]: value for key, value in totals(since, by=("minute",), **filters).items()}


def window_start(seconds, now=None):
    """The first whole minute of a window ending now (the current, partial minute included)."""
    return minute_of((now or timezone.now()) - timedelta(seconds=seconds)) + timedelta(minutes=1)


def prune(before):
    """Delete rows of minutes before `before`; returns how many."""
    deleted, _by_model = JobRollup.objects.filter(minute__lt=before).delete()
    return deleted
