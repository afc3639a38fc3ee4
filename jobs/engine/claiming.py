"""Claiming: taking READY jobs for a worker, safely across many processes.

Most jobs need no decision but their place in claim order: no concurrency or
rate key, in a queue without a global limit or a gap. On PostgreSQL those are
claimed in one statement (queries.CLAIM_PLAIN: candidates locked with
`FOR UPDATE SKIP LOCKED`, marked RUNNING, and the names of the queues that
still hold work it did not take), so most claims cost one round trip. The
statement stops before the first job with a key, so claim order holds.

Everything else goes through the checked claim, one short transaction for
every queue that still holds work:

1. read each queue's settings (paused? a global limit or a gap? then lock
   its row and see how many it may start: jobs/engine/limits.py);
2. pick candidates in claim order (jobs/engine/order.py) from the partial index,
   skipping rows other claimers hold (`FOR UPDATE SKIP LOCKED`); on
   PostgreSQL the statements of steps 1 and 2 travel in one round trip
   (queries.together), each still running after the one before it;
3. lock the limit rows of the candidates' concurrency keys and count the
   RUNNING jobs that carry them; lock the rate rows of their rate keys;
4. take the candidates that fit every key and whose rate window has room;
   park the ones behind a full key (they leave the claim index until a slot
   frees) or a full window (until it opens);
5. mark the taken ones RUNNING with a fresh lease, by id.

Step 5 updates a list of ids computed in step 2-4, never "the first N rows of
a subquery": the planner is free to re-evaluate a LIMIT subquery inside an
UPDATE and take more rows than asked (Oban fences it with a CTE for the same
reason; CLAIM_PLAIN's candidates are a CTE, evaluated once). The job runs
after the transaction commits.

On SQLite the transaction is IMMEDIATE (see settings): it takes the database's
write lock first, so claimers are serialised and SKIP LOCKED (which Django
silently ignores there) is not needed.
"""

import itertools
import time
import uuid

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs import conf
from jobs.engine import limits, queries, transitions
from jobs.models import CLAIM_ORDER, CLAIMABLE, PARKED, Job

# Candidates read per round: a few more than wanted, so some may be blocked.
OVERFETCH = 8
ROUNDS = 3
# Queues whose first claimable job carries a key leave the one-statement claim
# nothing to take: after such a miss a worker goes straight to the checked
# claim for this long, instead of paying a statement for nothing each time.
PLAIN_MISS_PAUSE_S = 1.0
_plain_paused_until = {}  # {the queues of the one-statement claim: time.monotonic()}


class Claimed(list):
    """The jobs a claim took; `rate_opens_in_s`: seconds until the earliest rate window this
    claim parked jobs behind opens (None when it parked none), and `rest_ends_in_s`: until the
    earliest rest of a queue it found resting ends, so its worker knows when to look again."""

    rate_opens_in_s = None
    rest_ends_in_s = None


def claim(worker, *, queues, kinds, limit, slots=None):
    """Claim up to `limit` jobs of `kinds` from `queues` (in that order) for `worker`.

    `slots` ({queue: free slots}) caps each queue of a worker that gives its
    queues slots of their own; without it they share `limit`.

    On PostgreSQL the queues before the first one with a global limit or a
    gap are claimed from first in one statement (queries.claim_plain), which
    takes, in claim order, the jobs that carry no concurrency or rate key: one
    round trip for most claims. What it leaves (a job with a key and what
    follows it, the limited queues and those after them) goes through the
    checked claim below, and only when one of those queues holds a claimable job.
    """
    caps, settings = {}, {}
    for queue in queues:
        cap = limit if slots is None else min(limit, slots.get(queue, 0))
        row = limits.queue_settings(queue)
        if cap > 0 and not (row is not None and row.paused):
            caps[queue], settings[queue] = cap, row
    jobs = Claimed()
    plain = dict(itertools.takewhile(lambda item: not limits.is_limited(settings[item[0]]),
                                     caps.items()))
    paused_key = (tuple(plain), tuple(kinds))
    if plain and queries.is_postgres() and time.monotonic() >= _plain_paused_until.get(paused_key, 0):
        taken, waiting = queries.claim_plain(plain, kinds, limit,
                                             elsewhere=[queue for queue in caps if queue not in plain],
                                             worker=worker, token=uuid.uuid4(),
                                             lease_s=conf.JOBS_LEASE_SECONDS)
        if not taken and waiting & set(plain):
            _plain_paused_until[paused_key] = time.monotonic() + PLAIN_MISS_PAUSE_S
        jobs.extend(taken)
        for job in taken:
            caps[job.queue] -= 1
        caps = {queue: cap for queue, cap in caps.items() if queue in waiting and cap > 0}
    if caps and len(jobs) < limit:
        checked = _claim_checked(worker, caps, settings, kinds, limit - len(jobs))
        jobs.extend(checked)
        jobs.rate_opens_in_s = checked.rate_opens_in_s
        jobs.rest_ends_in_s = checked.rest_ends_in_s
    # The attempt's run time (the rollup, the TaskResult) is measured on this
    # process's clock, from here: a database clock apart from it would skew it.
    now = timezone.now()
    for job in jobs:
        job.worker = worker
        job.started_at = now
    return jobs


def _claim_checked(worker, caps, settings, kinds, limit):
    """The claim that decides on limits and keys, in one transaction for all `caps`' queues.

    On PostgreSQL the first candidates of every queue come from one statement,
    sent with BEGIN and the limited queues' locks and counts in one round
    trip: a claim that finds its jobs among them costs three (that one, the
    UPDATE, COMMIT) whatever the number of queues.
    """
    chosen = Claimed()
    with transaction.atomic():
        # A queue whose allowance turns out to be 0 holds its candidates' row
        # locks until this commits.
        with queries.together():
            allowances = {queue: limits.Allowance(queue) for queue in caps
                          if limits.is_limited(settings[queue])}
            read_first = _first_candidates(list(caps), kinds, max(caps.values()) + OVERFETCH)
        plan = {}
        for queue, cap in caps.items():
            want = allowances[queue](cap) if queue in allowances else cap
            if want > 0:
                plan[queue] = want
        rests = [a.rest_ends_in_s for a in allowances.values() if a.rest_ends_in_s is not None]
        chosen.rest_ends_in_s = min(rests, default=None)
        if not plan:
            return chosen
        first = read_first()
        started = []
        for queue, want in plan.items():
            room = min(want, limit - len(chosen))
            if room <= 0:
                break
            taken = _choose(queue, kinds=kinds, want=room, first=first.get(queue, []),
                            claimed=chosen)
            chosen.extend(taken)
            if taken:
                started.append(queue)
        if not chosen:
            return chosen
        jobs = Claimed(queries.mark_running([job.pk for job in chosen], worker=worker,
                                            token=uuid.uuid4(), lease_s=conf.JOBS_LEASE_SECONDS))
        for queue in started:
            limits.rest(queue)  # a queue with a gap rests from each start
    jobs.rate_opens_in_s = chosen.rate_opens_in_s
    jobs.rest_ends_in_s = chosen.rest_ends_in_s
    return jobs


def _choose(queue, *, kinds, want, claimed, first=None):
    chosen, seen = [], []
    for round_ in range(ROUNDS):
        batch = want - len(chosen)
        if round_ == 0 and first is not None:
            candidates = first
        else:
            candidates = _send_candidates(queue, kinds, batch + OVERFETCH, exclude=seen).rows()
        if not candidates:
            break
        seen.extend(job.pk for job in candidates)
        taken, opens_in_s, unreadable = limits.fit(candidates, queue=queue, room=batch)
        if unreadable:
            transitions.fail_unreadable(
                list(Job.objects.filter(pk__in=[job.pk for job in unreadable])), code="invalid_keys")
        chosen.extend(taken)
        if opens_in_s is not None:
            claimed.rate_opens_in_s = min(opens_in_s, claimed.rate_opens_in_s or opens_in_s)
        if len(chosen) >= want or len(candidates) < batch + OVERFETCH:
            break
    return chosen


def _first_candidates(queues, kinds, count):
    """Send the query of every queue's first `count` candidates (locked; one statement on
    PostgreSQL); returns a function that reads them as {queue: its candidates}."""
    if connection.vendor != "postgresql" or len(queues) == 1:
        sent = [_send_candidates(queue, kinds, count, exclude=()) for queue in queues]
    else:
        sent = [queries.first_candidates(queues, kinds, count)]

    def read():
        found = {queue: [] for queue in queues}
        for pending in sent:
            for job in pending.rows():
                found[job.queue].append(job)
        return found

    return read


_compiled = {}


def _send_candidates(queue, kinds, count, *, exclude):
    """Send the candidate query, compiled once per shape: the ORM's compile
    step costs more than the query itself at thousands of claims a second.
    Candidates, not models: only what `limits.fit` decides on is read."""
    if exclude:
        query = candidates_query(queue, kinds).exclude(pk__in=exclude)
        return queries.candidates(*_columns(query)[:count].query.sql_with_params())
    key = (connection.alias, queue, tuple(kinds), count)
    compiled = _compiled.get(key)
    if compiled is None:
        query = _columns(candidates_query(queue, kinds))
        compiled = _compiled[key] = query[:count].query.sql_with_params()
    return queries.candidates(*compiled)


def _columns(query):
    return query.values_list(*queries.Candidate.COLUMNS)


def candidates_query(queue, kinds):
    """READY jobs of `queue` claimable now, in claim order, skipping rows other claimers hold.

    Its WHERE clause matches the `jobs_job_claimable` partial index exactly,
    so the scan walks the index in order and stops at the LIMIT.
    """
    return (
        Job.objects.filter(CLAIMABLE, queue=queue, kind__in=kinds, run_after__lte=queries.Come())
        .order_by(*CLAIM_ORDER)
        .select_for_update(skip_locked=True)
    )


def claimable_exists(*, queues, kinds):
    """Whether any job is claimable now (for `--burst`); ignores keys and global limits.

    A job waiting for its rate window counts: it is claimable within a period.

    On PostgreSQL it skips the rows other transactions hold locked, as the
    claim does: a READY row held by a transaction left open (a claim in
    flight, a staff edit) is one this worker cannot take, and waiting for it
    would keep `--burst` from ever exiting. The lock it takes itself lasts
    this short transaction, as long as a claim's.
    """
    soon = CLAIMABLE | (PARKED & Q(blocked_key__startswith=limits.RATE_PREFIX))
    ready = Job.objects.filter(soon, queue__in=queues, kind__in=kinds, run_after__lte=queries.Come())
    if not queries.is_postgres():
        # No row locks to skip, and a transaction would be IMMEDIATE: the write lock for a read.
        return ready.exists()
    with transaction.atomic():
        return bool(list(ready.select_for_update(skip_locked=True).values_list("pk", flat=True)[:1]))
