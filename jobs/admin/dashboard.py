"""What the admin's dashboard shows, from the per-minute rollup and queue samples only.

For the last hour (one slot a minute) or the last day (one slot per 15
minutes), for every queue or one, every kind or one: jobs finished per slot
by outcome, queue depth, the oldest runnable job's age and running jobs (the
highest sample in each slot), and the slowest kinds by p95. The numbers for
"now" are the same indexed counts a worker samples (jobs/maintenance/sampling.py). A
page view reads a few hundred rollup rows at most; it never scans the jobs.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from jobs.engine import registry, rollup
from jobs.maintenance import sampling
from jobs.models import JobRollup
from jobs.selectors import standing as selectors

RANGES = {
    # name: (span, slot)
    "hour": (timedelta(hours=1), timedelta(minutes=1)),
    "day": (timedelta(days=1), timedelta(minutes=15)),
}
RANGE_LABELS = {"hour": _("Last hour"), "day": _("Last day")}
SLOWEST = 10  # kinds listed by p95


@dataclass
class Slot:
    start: datetime
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    retried: int = 0
    ready: int | None = None  # None: no sample in the slot (no worker was running)
    waiting: int | None = None
    running: int | None = None
    latency_s: float | None = None

    @property
    def finished(self):
        return self.succeeded + self.failed + self.cancelled


@dataclass
class Dashboard:
    range: str
    queue: str
    kind: str
    start: datetime
    slot: timedelta
    slots: list
    by_queue: list = field(default_factory=list)  # [(queue, Totals, (ready, waiting, running, latency) now)]
    by_kind: list = field(default_factory=list)  # [(kind, label, Totals)], slowest p95 first
    now: dict = field(default_factory=dict)  # {queue: (ready, waiting, running, latency_s)}
    totals: rollup.Totals = field(default_factory=rollup.Totals)


def build(range_name="hour", *, queue="", kind="", now=None):
    """The dashboard for `range_name` ("hour" or "day"), narrowed to `queue` and `kind` when given."""
    now = now or timezone.now()
    span, step = RANGES.get(range_name, RANGES["hour"])
    end = rollup.minute_of(now) + timedelta(minutes=1)  # the current minute is included
    start = end - span
    slots = [Slot(start + i * step) for i in range(int(span / step))]

    def slot_of(moment):
        return slots[min(len(slots) - 1, int((moment - start) / step))]

    filters = {name: value for name, value in (("queue", queue), ("kind", kind)) if value}
    for minute, totals in rollup.per_minute(start, **filters).items():
        if minute < start:
            continue
        slot = slot_of(minute)
        for name in rollup.COUNTS:
            setattr(slot, name, getattr(slot, name) + getattr(totals, name))
    sample_queue = queue or (registry.get(kind).policy.queue if kind in registry.names() else "")
    for minute, (ready, waiting, running, latency) in sampling.series(start, queue=sample_queue).items():
        if minute < start:
            continue
        slot = slot_of(minute)
        slot.ready = max(slot.ready or 0, ready)
        slot.waiting = max(slot.waiting or 0, waiting)
        slot.running = max(slot.running or 0, running)
        slot.latency_s = max(slot.latency_s or 0.0, latency)

    queues = [queue] if queue else selectors.queue_names()
    live = sampling.live_state(queues, now)
    per_queue = rollup.totals(start, by=("queue",), **({"kind": kind} if kind else {}))
    per_kind = rollup.totals(start, by=("kind",), **({"queue": queue} if queue else {}))
    by_kind = sorted(((k, registry.label(k), t) for (k,), t in per_kind.items() if not kind or k == kind),
                     key=lambda row: (-(row[2].p95_s or 0), row[0]))
    return Dashboard(
        range=range_name if range_name in RANGES else "hour", queue=queue, kind=kind, start=start,
        slot=step, slots=slots, now=live,
        by_queue=[(name, per_queue.get((name,), rollup.Totals()), live.get(name)) for name in queues],
        by_kind=by_kind[:SLOWEST],
        totals=rollup.totals(start, **filters).get((), rollup.Totals()),
    )


def kinds_seen(since):
    """Kinds to offer in the filter: registered ones and those the rollup has rows for."""
    names = set(registry.names())
    names.update(JobRollup.objects.filter(minute__gte=since).order_by()
                 .values_list("kind", flat=True).distinct())
    return sorted(names)
