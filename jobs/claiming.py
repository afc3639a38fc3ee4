"""Claiming: taking READY jobs for a worker, safely across many processes.

One short transaction per queue:

1. read the queue's settings (paused? a global limit or a gap? then lock its row);
2. pick candidates in claim order from the partial index, skipping rows other
   claimers hold (`FOR UPDATE SKIP LOCKED`);
3. lock the limit rows of the candidates' concurrency keys and count the
   RUNNING jobs that carry them;
4. take the candidates that fit every key; park the ones behind a full key
   (they leave the claim index until a slot frees);
5. mark the taken ones RUNNING with a fresh lease, by id.

Step 5 updates a list of ids computed in step 2-4, never "the first N rows of
a subquery": the planner is free to re-evaluate a LIMIT subquery inside an
UPDATE and take more rows than asked (Oban fences it with a CTE for the same
reason). The job runs after the transaction commits.

On SQLite the transaction is IMMEDIATE (see settings): it takes the database's
write lock first, so claimers are serialised and SKIP LOCKED (which Django
silently ignores there) is not needed.
"""

import logging
import time
import uuid
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from jobs import bounds, conf, services, sql
from jobs.models import CLAIM_ORDER, Job, JobStatus, Queue

log = logging.getLogger(__name__)

# Candidates read per round: a few more than wanted, so some may be blocked.
OVERFETCH = 8
ROUNDS = 3


def claim(worker, *, queues, kinds, limit):
    """Claim up to `limit` jobs of `kinds` from `queues` (in that order) for `worker`.

    One transaction for all queues: on PostgreSQL the first candidates of
    every queue come from one statement, so an idle worker serving four
    queues pays four round trips for a claim, not a dozen.
    """
    with transaction.atomic():
        plan = {}
        for queue in queues:
            row = _queue_settings(queue)
            if row is not None and row.paused:
                continue
            want = limit
            if row is not None and (row.concurrency is not None or row.gap_seconds):
                want = _queue_allowance(queue, limit)
            if want > 0:
                plan[queue] = (want, row)
        if not plan:
            return []
        first = _first_candidates(list(plan), kinds, limit + OVERFETCH)
        chosen, gapped = [], []
        for queue, (want, row) in plan.items():
            room = min(want, limit - len(chosen))
            if room <= 0:
                break
            taken = _choose(queue, kinds=kinds, want=room, first=first.get(queue, []))
            chosen.extend(taken)
            if taken and row is not None and row.gap_seconds:
                gapped.append(queue)
        if not chosen:
            return []
        token = uuid.uuid4()
        sql.mark_running([job.pk for job in chosen], worker=worker, token=token,
                         lease_s=conf.JOBS_LEASE_SECONDS)
        if gapped:
            Queue.objects.filter(name__in=gapped).update(last_started_at=Now())
    # The rows hold the database's clock; this copy, which the attempt's
    # TaskResult is built from, is this process's, close enough.
    started = timezone.now()
    for job in chosen:
        job.status = JobStatus.RUNNING
        job.worker = worker
        job.lease_token = token
        job.attempts += 1
        job.worker_ids = [*job.worker_ids, worker.name]
        job.first_started_at = job.first_started_at or job.started_at or started
        job.started_at = started
    return chosen


# Queue settings without a limit are read at most once a second per process:
# a pause takes effect within that second. Limited queues lock their row.
QUEUE_CACHE_S = 1.0
_queue_cache = {}


def _queue_settings(queue):
    now = time.monotonic()
    cached = _queue_cache.get(queue)
    if cached is not None and cached[0] > now:
        return cached[1]
    row = _sane(Queue.objects.filter(name=queue).first())
    _queue_cache[queue] = (now + QUEUE_CACHE_S, row)
    return row


def _sane(row):
    """The queue's row with its limits within bounds (a row edited by hand may hold anything)."""
    if row is not None:
        row.concurrency = None if row.concurrency is None else bounds.sane(
            row.concurrency, low=0, high=bounds.LIMIT_MAX, default=0,
            what=f"the global limit of queue {row.name!r}")
        row.gap_seconds = bounds.sane(row.gap_seconds, low=0, high=bounds.GAP_SECONDS_MAX,
                                      default=0.0, what=f"the gap of queue {row.name!r}")
    return row


def forget_queue_settings():
    """Drop this process's cached queue settings (after a change made here)."""
    _queue_cache.clear()


def _queue_allowance(queue, want):
    """How many jobs a queue with a global limit or gap may start now (its row is locked)."""
    row = _sane(Queue.objects.select_for_update().get(name=queue))
    if row.gap_seconds:
        if row.last_started_at and timezone.now() - row.last_started_at < timedelta(
            seconds=row.gap_seconds
        ):
            return 0
        want = 1  # a gap between starts means one start per gap
    if row.concurrency is not None:
        running = Job.objects.filter(queue=queue, status=JobStatus.RUNNING).count()
        want = min(want, row.concurrency - running)
    return want


def _choose(queue, *, kinds, want, first=None):
    chosen, seen = [], []
    for round_ in range(ROUNDS):
        batch = want - len(chosen)
        if round_ == 0 and first is not None:
            candidates = first
        else:
            candidates = _candidates(queue, kinds, batch + OVERFETCH, exclude=seen)
        if not candidates:
            break
        seen.extend(job.pk for job in candidates)
        chosen.extend(_fit(candidates, queue=queue, room=batch))
        if len(chosen) >= want or len(candidates) < batch + OVERFETCH:
            break
    return chosen


_compiled = {}

# Every served queue's first candidates in one statement (PostgreSQL): a
# LATERAL subquery per queue walks that queue's slice of the claim index.
FIRST_CANDIDATES_SQL = """
SELECT j.* FROM unnest(%s::text[]) WITH ORDINALITY AS q(name, n)
CROSS JOIN LATERAL (
    SELECT * FROM jobs_job
    WHERE status = 'READY' AND blocked_key IS NULL AND queue = q.name
      AND kind = ANY(%s) AND run_after <= STATEMENT_TIMESTAMP()
    ORDER BY priority DESC, position, enqueued_at, id
    LIMIT %s FOR UPDATE SKIP LOCKED
) j
ORDER BY q.n, j.priority DESC, j.position, j.enqueued_at, j.id
"""


def _first_candidates(queues, kinds, count):
    """{queue: its first `count` candidates}, locked; one statement on PostgreSQL."""
    if connection.vendor != "postgresql" or len(queues) == 1:
        return {queue: _candidates(queue, kinds, count, exclude=()) for queue in queues}
    found = {queue: [] for queue in queues}
    for job in Job.objects.raw(FIRST_CANDIDATES_SQL, [queues, list(kinds), count]):
        found[job.queue].append(job)
    return found


def _candidates(queue, kinds, count, *, exclude):
    """Run the candidate query, compiled once per shape: the ORM's compile
    step costs more than the query itself at thousands of claims a second."""
    if exclude:
        return list(candidates_query(queue, kinds).exclude(pk__in=exclude)[:count])
    key = (connection.alias, queue, tuple(kinds), count)
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compiled[key] = candidates_query(queue, kinds)[:count].query.sql_with_params()
    return list(Job.objects.raw(*compiled))


def candidates_query(queue, kinds):
    """READY jobs of `queue` claimable now, in claim order, skipping rows other claimers hold.

    Its WHERE clause matches the `jobs_job_claimable` partial index exactly,
    so the scan walks the index in order and stops at the LIMIT.
    """
    return (
        Job.objects.filter(
            status=JobStatus.READY,
            blocked_key__isnull=True,
            queue=queue,
            kind__in=kinds,
            run_after__lte=Now(),
        )
        .order_by(*CLAIM_ORDER)
        .select_for_update(skip_locked=True)
    )


def _fit(candidates, *, queue, room):
    """The candidates whose every key has a free slot, in order; park the rest.

    A job whose keys are not a list of strings (a row edited by hand) is failed
    here: it could never be counted against a limit.
    """
    unreadable = [job for job in candidates if not _readable_keys(job.concurrency_keys)]
    if unreadable:
        log.warning("failing jobs %s: their concurrency keys are not a list of strings",
                    [job.pk for job in unreadable])
        services.fail_unreadable([job.pk for job in unreadable], code="invalid_keys")
        candidates = [job for job in candidates if job not in unreadable]
    keys = {key for job in candidates for key in job.concurrency_keys}
    limits = sql.lock_limits(keys)
    in_use = sql.running_counts(list(keys))
    taken, parked = [], {}
    for job in candidates:
        if len(taken) >= room:
            break
        # A key without a limit row is unlimited: enqueue always creates one.
        full = next(
            (k for k in job.concurrency_keys if k in limits and in_use.get(k, 0) >= limits[k]), None
        )
        if full is not None:
            parked.setdefault(full, []).append(job.pk)
            continue
        for key in job.concurrency_keys:
            in_use[key] = in_use.get(key, 0) + 1
        taken.append(job)
    for key, ids in parked.items():
        services.park(ids, key, queue)
    return taken


def _readable_keys(keys):
    return isinstance(keys, list) and all(isinstance(key, str) for key in keys)


def claimable_exists(*, queues, kinds):
    """Whether any job is claimable now (for `--burst`); ignores keys and global limits.

    On PostgreSQL it skips the rows other transactions hold locked, as the
    claim does: a READY row held by a transaction left open (a claim in
    flight, a staff edit) is one this worker cannot take, and waiting for it
    would keep `--burst` from ever exiting. The lock it takes itself lasts
    this short transaction, as long as a claim's.
    """
    ready = Job.objects.filter(
        Q(status=JobStatus.READY, blocked_key__isnull=True, queue__in=queues, kind__in=kinds,
          run_after__lte=Now())
    )
    if not sql.is_postgres():
        # No row locks to skip, and a transaction would be IMMEDIATE: the write lock for a read.
        return ready.exists()
    with transaction.atomic():
        return bool(list(ready.select_for_update(skip_locked=True).values_list("pk", flat=True)[:1]))
