"""Limits: how many jobs may run at once per concurrency key and per queue, and a queue's rest.

A *concurrency key* ("user:42", "asset:7") admits at most its limit of
RUNNING jobs across the deployment; every key of a job must have room for it
to start. A key's limit is its `ConcurrencyLimit` row, which enqueue creates
with the kind's default; a key without a row (only a row deleted by hand) has
no limit. `Slots.full()` is the one place that decides whether a key is full.

Every decision that admits a job locks the limit rows of its keys first
(sorted, so two lockers never deadlock) and counts the RUNNING jobs under
that lock: a second claimer of the same key waits, then counts the first
one's committed claim, so a limit holds across any number of workers.

A READY job behind a full key is *parked* (`blocked_key` set): it leaves the
claim index, so one user's backlog is never scanned past by the claim. Each
job that leaves RUNNING unparks as many of its keys' waiting jobs as there
are free slots, in the same transaction (`left_running`).

A *rate key* ("site:example.com", a kind's name) admits at most N starts
within any period (`RateLimit` rows; `Rates.full()` decides). The window is
a sliding log of the recent starts, by the database's clock, kept in the
key's row and locked in the claim like a concurrency limit: exact under any
number of claimers, where a fixed window or a token bucket lets up to twice
N start across a boundary. A job whose window is full is parked as
"@rate:<key>"; the row's `opens_at` says when its window next has room, and
the worker that parked it (or any reaper) unparks that many then
(`unpark_due_rates`), so nothing polls.

Queues have limits of their own, staff-editable (`Queue` rows): a global
concurrency, and a *gap*: the queue rests that long after each start and
after each end of one of its jobs before it starts another.
"""

import time
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from jobs import bounds, conf
from jobs.engine import queries, registry, wakeup
from jobs.models import PARKED, ConcurrencyLimit, Job, JobStatus, Queue, RateLimit

UNPARK_BATCH = 1000  # parked jobs freed or set aside per key and statement
# blocked_key of jobs parked for something other than a concurrency key:
# those lines are never unparked by a freed slot.
RATE_PREFIX = "@rate:"
PARENTS = "@parents"  # jobs/engine/dependencies.py


def is_concurrency_key(blocked_key):
    return not blocked_key.startswith("@")


class Slots:
    """The free slots of some keys, as one decision sees them.

    With `lock`, the keys' limit rows stay locked until the caller's
    transaction ends; without, it is a reading for a page.
    """

    def __init__(self, keys, *, lock=True):
        keys = sorted(set(keys))
        if lock:
            self.limits = queries.lock_limits(keys)
        else:
            self.limits = {key: bounds.sane(limit, low=0, high=bounds.LIMIT_MAX, default=1,
                                            what=f"the limit of key {key!r}")
                           for key, limit in ConcurrencyLimit.objects.filter(key__in=keys)
                           .values_list("key", "limit")}
        self.running = queries.running_counts(keys)

    def free(self, key):
        """Free slots of `key`; None when it has no limit."""
        if key not in self.limits:
            return None
        return max(0, self.limits[key] - self.running.get(key, 0))

    def full(self, keys):
        """The first of `keys` with no free slot, or None when a job carrying them may start."""
        return next((key for key in keys if self.free(key) == 0), None)

    def take(self, keys):
        """Count a job carrying `keys` as started."""
        for key in keys:
            self.running[key] = self.running.get(key, 0) + 1


class Rates:
    """The sliding windows of some rate keys, as one decision sees them.

    With `lock`, the keys' rows stay locked until the caller's transaction
    ends, and `save()` writes back the starts taken and when parked jobs may
    go; without, it is a reading for a page. A key without a row has no limit.
    """

    def __init__(self, keys, *, lock=True):
        keys = sorted({key for key in keys if key})
        rows = queries.lock_rates(keys) if lock else list(
            RateLimit.objects.filter(key__in=keys).values_list("key", "limit", "period_seconds",
                                                               "starts"))
        # Read after the lock is granted: a claimer that waited for it must
        # not date its starts before the ones it waited for.
        self.now = queries.clock_epoch() if rows else 0.0
        self.rows, self.window, self.parked, self.changed = {}, {}, set(), set()
        for key, limit, period, starts in rows:
            limit = bounds.sane(limit, low=1, high=bounds.LIMIT_MAX, default=1,
                                what=f"the rate limit of key {key!r}")
            period = bounds.sane(period, low=0.001, high=bounds.RATE_PERIOD_MAX_S, default=60.0,
                                 what=f"the rate period of key {key!r}")
            self.rows[key] = (limit, period)
            starts = starts if isinstance(starts, list) else []
            self.window[key] = sorted(t for t in starts if isinstance(t, int | float)
                                      and not isinstance(t, bool) and t > self.now - period)

    def full(self, key):
        """Whether a job with rate key `key` must wait for its window now."""
        return key in self.rows and len(self.window[key]) >= self.rows[key][0]

    def opens_at(self, key):
        """When `key`'s window next has room (epoch seconds), for a full key."""
        limit, period = self.rows[key]
        window = self.window[key]
        return window[len(window) - limit] + period

    def take(self, key):
        """Count a job with rate key `key` as started now."""
        if key in self.rows:
            self.window[key].append(self.now)
            self.changed.add(key)

    def hold(self, key):
        """Jobs of `key` wait for its window: note when it opens."""
        self.parked.add(key)
        self.changed.add(key)

    def save(self):
        for key in sorted(self.changed):
            fields = {"starts": self.window[key]}
            if key in self.parked:
                fields["opens_at"] = _moment(self.opens_at(key))
            RateLimit.objects.filter(key=key).update(**fields)


def _moment(epoch_s):
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def ensure(jobs):
    """Give every concurrency key of `jobs` a limit row (the kind's default) so claims can lock it,
    and every rate key with a known rate its rate row.

    `job.initial_limits` ({key: n}) overrides the kind's default for a key without a row;
    `job.initial_rates` ({key: "10/m"}) gives a rate key without a row its rate.
    """
    rows, rates = {}, {}
    for job in jobs:
        policy = registry.get(job.kind).policy
        for key in job.concurrency_keys:
            limit = job.initial_limits.get(key) or policy.limit_for(key)
            rows.setdefault(key, ConcurrencyLimit(key=key, limit=limit))
        rate = job.initial_rates.get(job.rate_key) if job.rate_key else None
        if rate and job.rate_key not in rates:
            limit, period = bounds.parse_rate(rate)
            rates[job.rate_key] = RateLimit(key=job.rate_key, limit=limit, period_seconds=period)
    if rows:
        ConcurrencyLimit.objects.bulk_create(rows.values(), ignore_conflicts=True)
    if rates:
        RateLimit.objects.bulk_create(rates.values(), ignore_conflicts=True)


def park_at_enqueue(jobs):
    """Enqueue the jobs whose key is full, or has a line of parked jobs, parked.

    A user who queues 100,000 jobs at a limit of 1 then never puts them in the
    claim index at all: they wait in the key's line and are unparked one per
    freed slot. The keys' rows are locked first, as `unpark` does, so a slot
    freed meanwhile cannot miss a job parked here.
    """
    keys = {key for job in jobs for key in job.concurrency_keys}
    lines = keys | {RATE_PREFIX + job.rate_key for job in jobs if job.rate_key}
    if not lines:
        return
    slots = Slots(keys)
    # A rate key's row is locked, as unpark_due_rates does, so a line being
    # emptied meanwhile cannot strand a job parked behind it here.
    Rates([job.rate_key for job in jobs])
    # Keys with a line: a new job waits behind it, so the line keeps its order.
    # (A full rate window with no line yet is the claim's to find.)
    in_line = set(
        Job.objects.filter(status=JobStatus.READY, blocked_key__in=list(lines))
        .values_list("blocked_key", flat=True).order_by().distinct()
    ) if len(lines) <= 50 else set()
    for job in jobs:
        full = next((k for k in job.concurrency_keys if k in in_line), None) \
            or slots.full(job.concurrency_keys)
        if full is None and job.rate_key and RATE_PREFIX + job.rate_key in in_line:
            full = RATE_PREFIX + job.rate_key
        if full is not None:
            job.blocked_key = full
            in_line.add(full)
        else:
            slots.take(job.concurrency_keys)


def fit(candidates, *, queue, room):
    """The claim's step 4: the candidates whose every key has a free slot, in order; park the rest.

    Returns (taken, seconds until a held rate opens or None, unreadable). A job
    whose keys are not a list of strings (a row edited by hand) is unreadable:
    it could never be counted against a limit, so the claim fails it.
    """
    unreadable = [job for job in candidates if not _readable_keys(job.concurrency_keys)]
    if unreadable:
        candidates = [job for job in candidates if job not in unreadable]
    slots = Slots({key for job in candidates for key in job.concurrency_keys})
    # Locked after the concurrency rows, as everywhere, so two lockers never deadlock.
    rates = Rates([job.rate_key for job in candidates])
    taken, parked, rate_held = [], {}, {}
    for job in candidates:
        if len(taken) >= room:
            break
        full = slots.full(job.concurrency_keys)
        if full is not None:
            parked.setdefault(full, []).append(job.pk)
            continue
        if rates.full(job.rate_key):
            rate_held.setdefault(job.rate_key, []).append(job.pk)
            continue
        slots.take(job.concurrency_keys)
        rates.take(job.rate_key)
        taken.append(job)
    for key, ids in parked.items():
        park(ids, key, queue)
    for key, ids in rate_held.items():
        rates.hold(key)
        Job.objects.filter(pk__in=ids, status=JobStatus.READY).update(blocked_key=RATE_PREFIX + key)
        queries.park_rate_backlog(key, RATE_PREFIX + key, queue, UNPARK_BATCH)
    rates.save()
    return taken, min((rates.opens_at(key) - rates.now for key in rate_held), default=None), unreadable


def _readable_keys(keys):
    return isinstance(keys, list) and all(isinstance(key, str) for key in keys)


def park(job_ids, key, queue):
    """Take READY jobs waiting for `key` out of the claim index (the caller holds the key's lock).

    Besides the jobs a claim just met, up to UNPARK_BATCH more of the key's
    READY jobs are set aside, so one user's long backlog leaves the index in a
    few statements instead of being scanned past on every claim.
    """
    Job.objects.filter(pk__in=job_ids, status=JobStatus.READY).update(blocked_key=key)
    queries.park_backlog(key, queue, UNPARK_BATCH)


def unpark(keys):
    """Unpark as many of each key's waiting jobs as it has free slots, in claim order."""
    if not keys:
        return
    slots = Slots(keys)
    for key in sorted(set(keys)):
        free = slots.free(key)
        free = UNPARK_BATCH if free is None else free
        if free <= 0:
            continue
        ids = list(Job.objects.filter(status=JobStatus.READY, blocked_key=key)
                   .in_claim_order().values_list("pk", flat=True)[:free])
        if ids:
            Job.objects.filter(pk__in=ids, status=JobStatus.READY, blocked_key=key).update(
                blocked_key=None)


def left_running(jobs):
    """In the transaction that moved `jobs` out of RUNNING: free their slots, rest their queues."""
    unpark([key for job in jobs for key in job.concurrency_keys])
    gapped = {job.queue for job in jobs if (queue_settings(job.queue) or NO_QUEUE).gap_seconds}
    for name in gapped:
        rest(name)


def owner_at_cap(owner, kinds, cap, *, unique_key=None, min_priority=None):
    """Whether a new job of `kinds` for `owner` would pass their `cap` of live jobs (queued,
    running or paused; counting only those of `min_priority` or more when given). A request
    joining the live job that holds `unique_key` is no new job. The caller serialises the
    owner's requests, so two cannot both take the last place."""
    live = Job.objects.live()
    if unique_key is not None and live.filter(unique_key=unique_key).exists():
        return False
    mine = live.filter(owner=owner, kind__in=list(kinds))
    if min_priority is not None:
        mine = mine.filter(priority__gte=min_priority)
    return mine.count() >= cap


def full_key(job):
    """The concurrency key `job` waits for, if one of its keys is full now (a reading for pages)."""
    if job.blocked_key:
        return job.blocked_key if is_concurrency_key(job.blocked_key) else None
    if not job.concurrency_keys or not _readable_keys(job.concurrency_keys):
        return None
    return Slots(job.concurrency_keys, lock=False).full(job.concurrency_keys)


def set_limit(key, limit):
    """Change a key's limit (staff edited a quota, say); waiting jobs take any new slots at once."""
    with transaction.atomic():
        ConcurrencyLimit.objects.update_or_create(key=key, defaults={"limit": limit})
        unpark([key])


def unpark_stranded():
    """Safety net: unpark jobs parked behind keys that have free slots.

    Every transition that frees a slot unparks in its own transaction; this
    only catches rows whose RUNNING job vanished without one (a row deleted by hand).
    """
    keys = list(
        Job.objects.filter(PARKED)
        .exclude(blocked_key__startswith="@")
        .values_list("blocked_key", flat=True).distinct()[:200]
    )
    for key in keys:
        with transaction.atomic():
            unpark([key])


# --- Rate keys ------------------------------------------------------------------------


def unpark_due_rates():
    """Unpark the jobs of every rate key whose window has opened; returns seconds to the next opening.

    Called by a worker when an opening it knows of is due, and by the reaper
    as the safety net (the worker that parked them died; a row edited by
    hand). As many jobs go back to the claim index as the window has room
    for, in claim order; when more wait, `opens_at` moves to the next opening.
    """
    due = RateLimit.objects.filter(opens_at__lte=queries.Come()).order_by("key")
    # Rate lines whose row says nothing (a row deleted or edited by hand): look now.
    stranded = set(Job.objects.filter(status=JobStatus.READY, blocked_key__startswith=RATE_PREFIX)
                   .values_list("blocked_key", flat=True).order_by().distinct()[:200])
    keys = set(due.values_list("key", flat=True)[:200])
    keys |= {line[len(RATE_PREFIX):] for line in stranded} - set(
        RateLimit.objects.filter(opens_at__isnull=False).values_list("key", flat=True))
    for key in sorted(keys):
        with transaction.atomic():
            _unpark_rate(key, unless_later=True)
    return queries.rate_opening_in()


def _unpark_rate(key, *, unless_later=False):
    """Under the key's row lock: unpark what its window has room for; set when to look next.

    `unless_later`: leave it when, by the time the lock is ours, another
    worker has already done this and set a later opening.
    """
    rates = Rates([key])
    if unless_later and RateLimit.objects.filter(key=key, opens_at__gt=queries.Come()).exists():
        return
    line = Job.objects.filter(status=JobStatus.READY, blocked_key=RATE_PREFIX + key)
    if key not in rates.rows:  # no row: no limit any more
        queues = set(line.values_list("queue", flat=True).distinct())
        line.update(blocked_key=None)
        for queue in queues:
            wakeup.notify(queue)
        return
    limit, period = rates.rows[key]
    room = max(0, limit - len(rates.window[key]))
    chosen = list(line.in_claim_order().values_list("pk", "queue")[:room])
    if chosen:
        Job.objects.filter(pk__in=[pk for pk, _queue in chosen], status=JobStatus.READY,
                           blocked_key=RATE_PREFIX + key).update(blocked_key=None)
        for queue in {queue for _pk, queue in chosen}:
            wakeup.notify(queue)
    opens_at = None
    if line.exists():
        # Once those start the window is full again: it next opens when its
        # oldest start leaves it (a period from now for an empty one).
        window = rates.window[key]
        opens_at = _moment((window[0] if window else rates.now) + period)
    RateLimit.objects.filter(key=key).update(starts=rates.window[key], opens_at=opens_at)


def rate_opens_at(job):
    """When `job`, held back by its rate key, may start (a reading for pages); None if it is not."""
    if not job.rate_key:
        return None
    if job.blocked_key == RATE_PREFIX + job.rate_key:
        row = RateLimit.objects.filter(key=job.rate_key).values_list("opens_at", flat=True).first()
        return row or timezone.now()
    rates = Rates([job.rate_key], lock=False)
    if rates.full(job.rate_key):
        return _moment(rates.opens_at(job.rate_key))
    return None


def set_rate(key, limit, period_seconds):
    """Change a rate key's limit (staff, live); waiting jobs take any new room at once."""
    with transaction.atomic():
        RateLimit.objects.update_or_create(key=key, defaults={
            "limit": limit, "period_seconds": period_seconds})
        _unpark_rate(key)


# --- Queues ---------------------------------------------------------------------------

# Queue settings are read at most once a second per process: a pause or a new
# gap takes effect within that second. Queues with a limit or a gap lock
# their row when they admit a job, so those decisions are never stale.
QUEUE_CACHE_S = 1.0
_queue_cache = {}
NO_QUEUE = Queue(name="", gap_seconds=0)


def queue_settings(name):
    """The queue's row (with sane values), or None for a queue without one; cached for a second."""
    now = time.monotonic()
    cached = _queue_cache.get(name)
    if cached is not None and cached[0] > now:
        return cached[1]
    row = _sane(Queue.objects.filter(name=name).first())
    _queue_cache[name] = (now + QUEUE_CACHE_S, row)
    return row


def forget_queue_settings():
    """Drop this process's cached queue settings (after a change made here)."""
    _queue_cache.clear()


def _sane(row):
    """The queue's row with its limits within bounds (a row edited by hand may hold anything)."""
    if row is not None:
        row.concurrency = None if row.concurrency is None else bounds.sane(
            row.concurrency, low=0, high=bounds.LIMIT_MAX, default=0,
            what=f"the global limit of queue {row.name!r}")
        row.gap_seconds = bounds.sane(row.gap_seconds, low=0, high=bounds.GAP_SECONDS_MAX,
                                      default=0.0, what=f"the gap of queue {row.name!r}")
    return row


def is_limited(row):
    """Whether admitting a job of this queue must lock its row (a global limit or a gap)."""
    return row is not None and (row.concurrency is not None or bool(row.gap_seconds))


class Allowance:
    """How many jobs a queue with a global limit or a gap may start now.

    Asked in two statements, which a claim sends with its others in one round
    trip (queries.together): the queue's row locked, then its RUNNING jobs
    counted. The count runs after the lock is ours, so a claimer that waited
    for it counts the claims it waited for. A resting queue starts none, and
    `rest_ends_in_s` then says when it may (so its worker looks again at that
    moment, not at its next poll); one with a gap starts one at a time (the
    start begins the next rest).
    """

    rest_ends_in_s = None

    def __init__(self, name):
        self.name = name
        self._row = queries.lock_queue(name)
        self._running = queries.count_running(name)

    def __call__(self, want):
        rows = self._row.rows()
        if not rows:  # the row was deleted since its settings were read: no limit now
            return want
        paused, concurrency, gap_seconds, rest_left_s = rows[0]
        row = _sane(Queue(name=self.name, paused=paused, concurrency=concurrency,
                          gap_seconds=gap_seconds))
        if row.paused:
            return 0
        if row.gap_seconds:
            if rest_left_s is not None and rest_left_s > 0:
                self.rest_ends_in_s = float(rest_left_s)
                return 0
            want = 1
        if row.concurrency is not None:
            [(running,)] = self._running.rows()
            want = min(want, row.concurrency - running)
        return want


def rest(name):
    """The queue rests its gap from now (after a start, and after each end of one of its jobs).

    Never shortens a rest already longer (a staff edit of the gap, a clock step).
    """
    row = queue_settings(name)
    if row is None or not row.gap_seconds:
        return
    until = Now() + timedelta(seconds=row.gap_seconds)
    Queue.objects.filter(name=name).exclude(rests_until__gt=until).update(rests_until=until)


def resting_until(row):
    """When a queue's rest ends, if it is resting now."""
    if row is not None and row.gap_seconds and row.rests_until and row.rests_until > timezone.now():
        return row.rests_until
    return None


def set_queue(name, **changes):
    """Change a queue's live settings (paused, concurrency, gap_seconds) for the whole fleet."""
    Queue.objects.update_or_create(name=name, defaults=changes)
    forget_queue_settings()


def ensure_queues():
    """Create the Queue rows named in JOBS_QUEUES that do not exist yet (never overwrite staff's edits)."""
    for name, defaults in conf.queue_defaults().items():
        Queue.objects.get_or_create(name=name, defaults=defaults)

