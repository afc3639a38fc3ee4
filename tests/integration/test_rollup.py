"""The per-minute rollup: written in the transaction that finishes a job, read by /metrics and
the dashboard, pruned with the history; and the queue samples workers take."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from jobs import services
from jobs.engine import outcome, rollup
from jobs.maintenance import prune, sampling
from jobs.models import DURATION_BOUNDS_S, Job, JobRollup, JobStatus, Outcome, QueueSample
from jobs.selectors import counts

pytestmark = pytest.mark.django_db(transaction=True)


def summed(**filters):
    rows = JobRollup.objects.filter(**filters)
    return {name: sum(getattr(r, name) for r in rows)
            for name in ("succeeded", "failed", "cancelled", "retried", "took_count")}


def test_a_worker_counts_what_it_finishes_once_each_by_queue_kind_and_outcome(run_worker):
    for n in range(4):
        services.enqueue("tests.noop", {"n": n})
    services.enqueue("tests.fail_permanent", {})
    services.enqueue("tests.fail_value_error", {})  # two attempts: one retried, then failed
    services.enqueue("tests.other_queue", {})
    cancelled = services.enqueue("tests.noop", {"n": "never"}, run_after=timezone.now() + timedelta(hours=1))
    services.cancel(cancelled)
    run_worker()

    assert summed(kind="tests.noop") == {"succeeded": 4, "failed": 0, "cancelled": 1, "retried": 0,
                                         "took_count": 4}  # a job cancelled before it ran is not timed
    assert summed(kind="tests.fail_permanent") == {"succeeded": 0, "failed": 1, "cancelled": 0,
                                                   "retried": 0, "took_count": 1}
    assert summed(kind="tests.fail_value_error")["retried"] == 1
    assert summed(kind="tests.fail_value_error")["failed"] == 1
    assert summed(queue="other", kind="tests.other_queue")["succeeded"] == 1
    finished = Job.objects.filter(status__in=[JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.CANCELLED])
    everything = summed()
    assert everything["succeeded"] + everything["failed"] + everything["cancelled"] == finished.count()
    for row in JobRollup.objects.all():
        assert row.minute.second == 0 and row.minute.microsecond == 0
        assert sum(getattr(row, f"took_{i:02d}") for i in range(len(DURATION_BOUNDS_S) + 1)) \
            == row.took_count

    # /metrics reads the same rows.
    assert counts.recent_failures(timezone.now() - timedelta(minutes=5)) == {
        "tests.fail_permanent": 1, "tests.fail_value_error": 1}
    assert counts.recent_retries(timezone.now() - timedelta(minutes=5)) == {"tests.fail_value_error": 1}


def test_a_transition_that_rolls_back_counts_nothing(run_worker):
    job = services.enqueue("tests.noop", {})
    from jobs.engine import claiming
    from jobs.models import Worker

    worker = Worker.objects.create(name="w", host="h", pid=1)
    [claimed] = claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=1)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert outcome.record(claimed, Outcome.SUCCEEDED, result={"ok": True})
        raise RuntimeError("the connection died before the commit")
    assert not JobRollup.objects.exists()
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    assert outcome.record(claimed, Outcome.SUCCEEDED, result={"ok": True})
    assert summed()["succeeded"] == 1
    # A second, stale writer of the same end matches nothing and counts nothing.
    assert not outcome.record(claimed, Outcome.SUCCEEDED, result={"ok": True})
    assert summed()["succeeded"] == 1


def test_writers_of_one_minute_add_up_and_keep_the_longest():
    job = services.enqueue("tests.noop", {})
    now = timezone.now()
    rollup.count([(job, "succeeded", 0.05), (job, "succeeded", 2.0)], now=now)
    rollup.count([(job, "failed", 7.0)], now=now)
    rollup.count([(job, "succeeded", 0.2)], now=now + timedelta(minutes=1))
    rows = list(JobRollup.objects.order_by("minute"))
    assert [(r.succeeded, r.failed, r.took_count) for r in rows] == [(2, 1, 3), (1, 0, 1)]
    assert rows[0].took_max_s == 7.0 and rows[0].took_sum_s == pytest.approx(9.05)
    assert (rows[0].took_00, rows[0].took_04, rows[0].took_06) == (1, 1, 1)  # ≤0.1, ≤2.5, ≤10 s
    totals = rollup.totals(now - timedelta(minutes=1))[()]
    assert totals.succeeded == 3 and totals.took_count == 4


def test_percentiles_come_from_the_histogram_and_never_pass_the_slowest_job():
    histogram = [0] * (len(DURATION_BOUNDS_S) + 1)
    histogram[3] = 50   # 0.5-1 s
    histogram[6] = 50   # 5-10 s
    assert rollup.percentile(histogram, 0.5, 8.0) == pytest.approx(1.0)
    assert 5 < rollup.percentile(histogram, 0.95, 8.0) <= 8.0
    histogram = [0] * (len(DURATION_BOUNDS_S) + 1)
    histogram[-1] = 10  # all past the last bound
    assert DURATION_BOUNDS_S[-1] < rollup.percentile(histogram, 0.95, 7200.0) <= 7200.0
    assert rollup.percentile([0] * len(histogram), 0.5, 0) is None


def test_rollups_and_samples_are_pruned_with_the_history():
    job = services.enqueue("tests.noop", {})
    old = timezone.now() - timedelta(days=40)
    rollup.count([(job, "succeeded", 1.0)], now=old)
    rollup.count([(job, "succeeded", 1.0)])
    QueueSample.objects.create(queue="default", minute=rollup.minute_of(old))
    sampling.take(["default"])
    pruned = prune.prune_finished(timedelta(days=30))
    assert pruned.rollups == 2
    assert JobRollup.objects.count() == 1 and QueueSample.objects.count() == 1


def test_a_queue_is_sampled_once_a_minute_from_its_indexed_counts():
    services.enqueue("tests.noop", {})
    services.enqueue("tests.noop", {}, run_after=timezone.now() + timedelta(hours=1))
    running = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=running.pk).update(status=JobStatus.RUNNING)
    now = timezone.now()
    assert sampling.take(["default", "other"], now) == 2
    assert sampling.take(["default", "other"], now) == 0  # another worker, the same minute
    sample = QueueSample.objects.get(queue="default")
    assert (sample.ready, sample.waiting, sample.running) == (1, 2, 1)
    assert sampling.series(now - timedelta(minutes=1)) == {
        rollup.minute_of(now): (1, 2, 1, sample.latency_s)}
