"""Claims, limits and transitions, on PostgreSQL and SQLite."""

import threading
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from jobs import services
from jobs.engine import claiming, outcome
from jobs.maintenance import reaper
from jobs.models import ConcurrencyLimit, Job, JobEvent, JobStatus, Outcome, Queue, Worker

pytestmark = pytest.mark.django_db

ALL_KINDS = ["tests.noop", "tests.echo", "tests.limited", "tests.unique", "tests.sleep_for",
             "tests.fail_value_error", "tests.fail_permanent", "tests.retry_later",
             "tests.slow_backoff"]


def make_worker(name="w1"):
    return Worker.objects.create(name=name, host="h", pid=1)


def claim(worker, limit=10, queues=("default",), kinds=ALL_KINDS):
    return claiming.claim(worker, queues=list(queues), kinds=list(kinds), limit=limit)


def test_claim_order_is_priority_then_position_then_age():
    low = services.enqueue("tests.noop", {}, priority=-5)
    old = services.enqueue("tests.noop", {})
    new = services.enqueue("tests.noop", {})
    high = services.enqueue("tests.noop", {}, priority=50)
    moved = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=moved.pk).update(position=-1)
    got = [j.pk for j in claim(make_worker())]
    assert got == [high.pk, moved.pk, old.pk, new.pk, low.pk]
    assert list(Job.objects.ready().in_claim_order().values_list("pk", flat=True)) == []


def test_claim_sets_a_lease_and_records_the_worker():
    job = services.enqueue("tests.noop", {})
    worker = make_worker("machine-a:1")
    [claimed] = claim(worker)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.RUNNING
    assert row.lease_token == claimed.lease_token
    assert row.lease_expires_at > timezone.now()
    assert row.attempts == 1
    assert row.worker_ids == ["machine-a:1"]


def test_future_run_after_and_other_queues_and_unknown_kinds_are_not_claimed():
    services.enqueue("tests.noop", {}, run_after=timezone.now() + timezone.timedelta(hours=1))
    services.enqueue("tests.other_queue", {})
    services.enqueue("tests.echo", {})
    assert claim(make_worker(), kinds=["tests.noop"]) == []


def test_a_paused_queue_is_not_claimed_and_a_global_limit_holds():
    for _ in range(5):
        services.enqueue("tests.noop", {})
    services.set_queue("default", paused=True)
    worker = make_worker()
    assert claim(worker) == []
    services.set_queue("default", paused=False, concurrency=2)
    assert len(claim(worker)) == 2
    assert claim(worker) == []  # two running: the limit is reached


def test_a_gap_rests_the_queue_after_each_start_and_after_each_end():
    for _ in range(3):
        services.enqueue("tests.noop", {})
    services.set_queue("default", gap_seconds=60)
    worker = make_worker()
    [first] = claim(worker)
    assert claim(worker) == []  # resting from the start
    Queue.objects.filter(name="default").update(rests_until=timezone.now() - timezone.timedelta(seconds=1))
    assert outcome.record(first, Outcome.SUCCEEDED)
    assert claim(worker) == []  # resting from the end, however long the job took
    rest = Queue.objects.get(name="default").rests_until
    assert rest >= timezone.now() + timezone.timedelta(seconds=59)
    Queue.objects.filter(name="default").update(rests_until=timezone.now() - timezone.timedelta(seconds=1))
    assert len(claim(worker)) == 1


def test_a_full_key_parks_its_jobs_and_others_still_run():
    for _ in range(30):
        services.enqueue("tests.limited", {"keys": ["user:1"]})
    other = services.enqueue("tests.limited", {"keys": ["user:2"]})
    worker = make_worker()
    first = claim(worker, limit=4)
    # One for user 1 (limit 1), and user 2's job despite 29 older ones waiting.
    assert sorted(j.payload["keys"][0] for j in first) == ["user:1", "user:2"]
    assert other.pk in [j.pk for j in first]
    assert Job.objects.filter(blocked_key="user:1").count() == 29
    # Finishing user 1's job unparks exactly one of the waiting ones.
    running = next(j for j in first if j.payload["keys"] == ["user:1"])
    assert outcome.record(running, Outcome.SUCCEEDED)
    assert Job.objects.filter(blocked_key="user:1").count() == 28
    [nxt] = claim(worker, limit=4)
    assert nxt.payload["keys"] == ["user:1"]


def test_every_key_of_a_job_must_have_room():
    a = services.enqueue("tests.limited", {"keys": ["user:1", "asset:9"]})
    b = services.enqueue("tests.limited", {"keys": ["user:2", "asset:9"]})
    worker = make_worker()
    assert [j.pk for j in claim(worker)] == [a.pk]
    assert Job.objects.get(pk=b.pk).blocked_key == "asset:9"


def test_raising_a_limit_lets_waiting_jobs_run():
    for _ in range(4):
        services.enqueue("tests.limited", {"keys": ["user:5"]})
    worker = make_worker()
    assert len(claim(worker)) == 1
    assert claim(worker) == []
    services.set_limit("user:5", 3)
    assert ConcurrencyLimit.objects.get(key="user:5").limit == 3
    assert len(claim(worker)) == 2


def test_transitions_are_guarded_by_the_lease_token():
    job = services.enqueue("tests.noop", {})
    [claimed] = claim(make_worker())
    stale = Job.objects.get(pk=job.pk)
    stale.lease_token = uuid.uuid4()
    assert outcome.record(stale, Outcome.SUCCEEDED) is False
    assert services.report_progress(stale, fraction=0.5) is False
    assert outcome.record(stale, Outcome.RETRY, error="x") is False
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert outcome.record(claimed, Outcome.SUCCEEDED, result={"done": True})
    assert outcome.record(claimed, Outcome.SUCCEEDED) is False  # a second completion changes nothing
    assert Job.objects.get(pk=job.pk).result == {"done": True}


def test_failure_retries_until_attempts_run_out():
    job = services.enqueue("tests.fail_value_error", {})
    worker = make_worker()
    [c] = claim(worker)
    assert outcome.record(c, Outcome.RETRY, error="boom", code="error", delay_s=0)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.READY and row.attempts == 1
    [c] = claim(worker)
    assert outcome.record(c, Outcome.RETRY, error="boom again", code="error", delay_s=0)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.FAILED and row.attempts == 2
    assert [e["message"] for e in row.errors] == ["boom", "boom again"]
    assert list(row.events.values_list("kind", flat=True)) == ["retry", "failed"]


def test_cancel_and_pause_of_running_jobs_wait_for_the_worker():
    job = services.enqueue("tests.limited", {"keys": ["user:3"]})
    waiting = services.enqueue("tests.limited", {"keys": ["user:3"]})
    worker = make_worker()
    [c] = claim(worker)
    services.cancel(c, reason="changed my mind")
    row = Job.objects.get(pk=job.pk)
    # Still RUNNING, still holding user:3's slot, until its worker stops it.
    assert row.status == JobStatus.RUNNING and row.stop_requested == Outcome.CANCELLED
    assert claim(worker) == []
    assert outcome.record(c, Outcome.CANCELLED)
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    [w] = claim(worker)
    assert w.pk == waiting.pk
    services.pause(w)
    assert outcome.record(w, Outcome.PAUSED)
    assert Job.objects.get(pk=w.pk).status == JobStatus.PAUSED
    paused = Job.objects.get(pk=w.pk)
    assert paused.attempts == 0  # a pause spends no attempt
    services.resume(paused)
    assert Job.objects.get(pk=w.pk).status == JobStatus.READY


def test_illegal_actions_say_so():
    from jobs.exceptions import IllegalTransition

    job = services.enqueue("tests.noop", {})
    with pytest.raises(IllegalTransition):
        services.resume(job)
    with pytest.raises(IllegalTransition):
        services.retry(job)
    services.cancel(job)
    with pytest.raises(IllegalTransition):
        services.cancel(job)
    services.retry(job)
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    assert list(JobEvent.objects.filter(job=job).values_list("kind", flat=True)) == ["cancelled", "retried"]


def test_rescue_requeues_only_expired_leases_and_spends_the_attempt():
    live = services.enqueue("tests.sleep_for", {})
    dead = services.enqueue("tests.sleep_for", {})
    worker = make_worker()
    claim(worker)
    Job.objects.filter(pk=dead.pk).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    assert reaper.rescue_expired() == [dead.pk]
    assert Job.objects.get(pk=live.pk).status == JobStatus.RUNNING
    rescued = Job.objects.get(pk=dead.pk)
    assert rescued.status == JobStatus.READY and rescued.attempts == 1
    assert rescued.lease_token is None
    assert rescued.events.get().kind == Outcome.EXPIRED


def test_a_rescued_job_waits_out_its_kinds_backoff_like_any_failed_attempt():
    job = services.enqueue("tests.slow_backoff", {})  # backoff from 600 s, full jitter
    claim(make_worker())
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    before = timezone.now()
    assert reaper.rescue_expired() == [job.pk]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.error_code) == (JobStatus.READY, 1, "lease_expired")
    # Attempt 1's backoff is drawn from 300..600 s: not claimable now.
    assert row.run_after >= before + timezone.timedelta(seconds=299)
    assert claim(make_worker("w2")) == []


def test_rescue_fails_a_job_whose_attempts_are_spent():
    job = services.enqueue("tests.echo", {})  # max_attempts=1
    claim(make_worker())
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    reaper.rescue_expired()
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.FAILED and row.error_code == "lease_expired"


def test_shutdown_requeue_spends_no_attempt():
    job = services.enqueue("tests.sleep_for", {})
    [c] = claim(make_worker())
    assert outcome.record(c, Outcome.REQUEUED, error="shutdown")
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.READY and row.attempts == 0
    assert outcome.record(c, Outcome.REQUEUED, error="shutdown") is False  # exactly once


@pytest.mark.django_db(transaction=True)
def test_two_claimers_released_together_never_exceed_a_limit_of_one():
    """Deterministic interleaving: both claimers start at the same instant, many times."""
    worker_a, worker_b = make_worker("a"), make_worker("b")
    for round_ in range(10):
        for _ in range(3):
            services.enqueue("tests.limited", {"keys": [f"user:{round_}"]})
        barrier = threading.Barrier(2)
        got = []

        def claimer(worker, barrier=barrier, got=got):
            try:
                barrier.wait()
                got.extend(claim(worker, limit=3))
            finally:
                connection.close()

        threads = [threading.Thread(target=claimer, args=(w,)) for w in (worker_a, worker_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        keys = [j.concurrency_keys[0] for j in got]
        assert len(keys) == len(set(keys)), f"round {round_}: one user got two jobs at once: {keys}"
        assert got, "nobody claimed anything"
        running = [j.concurrency_keys[0] for j in Job.objects.filter(status=JobStatus.RUNNING)]
        assert len(running) == len(set(running))
        for job in got:
            outcome.record(job, Outcome.SUCCEEDED)


def test_the_hot_path_spends_a_fixed_number_of_queries_per_batch(django_assert_max_num_queries):
    services.enqueue_many([("tests.noop", {}, {}) for _ in range(50)])
    worker = make_worker()
    claim(worker, limit=1)  # compiles and caches the candidate query's shape
    # On PostgreSQL jobs without keys in a queue without limits are claimed in one
    # statement; elsewhere the candidates and one UPDATE for the whole batch (queue
    # settings are cached), inside a savepoint here because the test runs in a transaction.
    with django_assert_max_num_queries(1 if connection.vendor == "postgresql" else 4):
        batch = claim(worker, limit=20)
    assert len(batch) == 20
    # Jobs without keys, gaps, hooks or dependents: on PostgreSQL one statement completes,
    # notes and counts the whole batch (plus a re-read of the queue's settings, cached for
    # a second); elsewhere one UPDATE, one INSERT of events, one upsert and a savepoint.
    with django_assert_max_num_queries(2 if connection.vendor == "postgresql" else 5):
        done = services.complete_many([(job, None) for job in batch])
    assert sorted(done) == sorted(job.pk for job in batch)
    assert Job.objects.filter(status=JobStatus.SUCCESSFUL).count() == 20


def test_a_completion_batch_keeps_every_guard_whichever_way_it_is_written():
    """Stale tokens change nothing; a parent's dependents and a key's waiting jobs are decided
    with it; each job that stuck is noted and counted once."""
    from jobs.models import JobRollup

    plain = [services.enqueue("tests.noop", {}) for _ in range(3)]
    parent = services.enqueue("tests.noop", {})
    child = services.enqueue("tests.noop", {}, depends_on=[parent])
    keyed = [services.enqueue("tests.limited", {"keys": ["user:1"]}) for _ in range(2)]
    batch = claim(make_worker(), limit=10)
    assert {job.pk for job in batch} == {*(j.pk for j in plain), parent.pk, keyed[0].pk}
    stale = next(job for job in batch if job.pk == plain[0].pk)
    stale.lease_token = uuid.uuid4()  # as a worker whose lease moved on would hold it
    done = services.complete_many([(job, {"n": job.pk}) for job in batch])
    assert sorted(done) == sorted(job.pk for job in batch if job is not stale)
    assert Job.objects.get(pk=stale.pk).status == JobStatus.RUNNING
    assert Job.objects.get(pk=plain[1].pk).result == {"n": plain[1].pk}
    child.refresh_from_db()
    assert child.status == JobStatus.READY and child.blocked_key is None
    assert Job.objects.get(pk=keyed[1].pk).blocked_key is None  # the key's slot was freed
    assert JobEvent.objects.filter(kind="succeeded").count() == len(done)
    assert sum(JobRollup.objects.values_list("succeeded", flat=True)) == len(done)
    assert sum(JobRollup.objects.values_list("took_count", flat=True)) == len(done)


def test_several_queues_are_claimed_in_their_order_in_one_go():
    other = [services.enqueue("tests.other_queue", {}) for _ in range(2)]
    default = [services.enqueue("tests.noop", {}, priority=50) for _ in range(2)]
    worker = make_worker()
    kinds = ["tests.noop", "tests.other_queue"]
    got = claim(worker, limit=3, queues=("other", "default"), kinds=kinds)
    # The first queue named is served first, whatever the priorities.
    assert [j.pk for j in got] == [other[0].pk, other[1].pk, default[0].pk]
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 3
    assert [j.pk for j in claim(worker, limit=3, queues=("other", "default"), kinds=kinds)] == [default[1].pk]


def test_a_job_with_a_key_keeps_its_place_in_claim_order_among_jobs_without():
    """On PostgreSQL jobs without keys are claimed in one statement, which stops before
    the first job with a key: the checked claim decides that one in its turn."""
    high = services.enqueue("tests.noop", {}, priority=10)
    keyed = services.enqueue("tests.limited", {"keys": ["user:1"]}, priority=5)
    low = services.enqueue("tests.noop", {}, priority=0)
    worker = make_worker()
    assert [j.pk for j in claim(worker, limit=2)] == [high.pk, keyed.pk]
    assert [j.pk for j in claim(worker, limit=2)] == [low.pk]


def test_a_job_whose_key_fills_is_parked_and_the_jobs_after_it_still_start():
    high = services.enqueue("tests.noop", {}, priority=10)
    first = services.enqueue("tests.limited", {"keys": ["user:1"]}, priority=6)
    second = services.enqueue("tests.limited", {"keys": ["user:1"]}, priority=5)
    low = services.enqueue("tests.noop", {}, priority=0)
    worker = make_worker()
    assert [j.pk for j in claim(worker, limit=5)] == [high.pk, first.pk, low.pk]
    assert Job.objects.get(pk=second.pk).blocked_key == "user:1"


def test_a_queue_with_a_limit_after_plain_ones_is_served_in_the_same_claim():
    services.set_queue("other", concurrency=1)
    default = [services.enqueue("tests.noop", {}) for _ in range(2)]
    other = [services.enqueue("tests.other_queue", {}) for _ in range(2)]
    worker = make_worker()
    kinds = ["tests.noop", "tests.other_queue"]
    got = claim(worker, limit=10, queues=("default", "other"), kinds=kinds)
    assert [j.pk for j in got] == [default[0].pk, default[1].pk, other[0].pk]
    assert claim(worker, limit=10, queues=("default", "other"), kinds=kinds) == []
    assert Job.objects.get(pk=other[1].pk).status == JobStatus.READY


def test_a_job_is_claimable_the_moment_it_is_enqueued_and_a_lease_expired_this_moment_is_rescued():
    # SQLite's clock counts milliseconds and Python writes microseconds: a time
    # written in the clock's current millisecond must count as come, or a claim
    # that follows its enqueue within the millisecond finds nothing.
    worker = make_worker()
    for _ in range(200):
        job = services.enqueue("tests.sleep_for", {})
        assert [c.pk for c in claim(worker, limit=1)] == [job.pk]
        Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now())
        assert reaper.rescue_expired() == [job.pk]
        Job.objects.filter(pk=job.pk).delete()
