"""A worker never dies of data: garbage already in the database is logged and read as the
nearest sane value, or the job it belongs to is failed, and the worker goes on (issue 18)."""

import logging
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from jobs import services
from jobs.engine import registry
from jobs.maintenance import reaper
from jobs.models import ConcurrencyLimit, Job, JobStatus, Queue
from jobs.runtime.worker import Worker
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_gap_of_1e308_in_the_queue_row_is_read_as_the_longest_gap(run_worker, caplog):
    # update(), like a hand-edited row, skips the model's validators.
    Queue.objects.create(name="default")
    Queue.objects.filter(name="default").update(
        gap_seconds=1e308, concurrency=2**31 - 1,
        rests_until=timezone.now() - timedelta(seconds=1))
    job = services.enqueue("tests.echo", {"i": 1})
    with caplog.at_level(logging.WARNING, logger="jobs.bounds"):
        worker = run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCESSFUL
    assert worker.claimed_total == 1
    assert "the gap of queue 'default' is 1e+308" in caplog.text
    assert "the global limit of queue 'default'" in caplog.text


def test_a_limit_row_out_of_range_is_read_as_the_highest_limit(run_worker, caplog):
    services.set_limit("user:1", 1)
    ConcurrencyLimit.objects.filter(key="user:1").update(limit=2**31 - 1)
    jobs = [services.enqueue("tests.limited", {"keys": ["user:1"]}) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="jobs.bounds"):
        run_worker()
    assert {Job.objects.get(pk=j.pk).status for j in jobs} == {JobStatus.SUCCESSFUL}
    assert "the limit of key 'user:1'" in caplog.text


def test_a_limit_row_that_holds_no_number_is_read_as_one(run_worker, caplog):
    if connection.vendor != "sqlite":
        pytest.skip("only SQLite stores text in an integer column")
    services.set_limit("user:2", 3)
    with connection.cursor() as cursor:
        cursor.execute("""UPDATE jobs_concurrencylimit SET "limit" = 'many' WHERE key = 'user:2'""")
    jobs = [services.enqueue("tests.limited", {"keys": ["user:2"]}) for _ in range(2)]
    with caplog.at_level(logging.WARNING, logger="jobs.bounds"):
        run_worker()
    assert {Job.objects.get(pk=j.pk).status for j in jobs} == {JobStatus.SUCCESSFUL}
    assert "the limit of key 'user:2' is 'many', not a number" in caplog.text


@pytest.mark.parametrize("keys", [{"user": 1}, [["user:1"]], "user:1", [1, 2], 7])
def test_a_job_whose_keys_are_no_list_of_strings_is_failed_and_the_rest_run(run_worker, caplog,
                                                                           keys):
    bad = services.enqueue("tests.limited", {"keys": ["user:3"]})
    Job.objects.filter(pk=bad.pk).update(concurrency_keys=keys)
    good = services.enqueue("tests.limited", {"keys": ["user:3"]})
    with caplog.at_level(logging.WARNING, logger="jobs.history"):
        run_worker()
    bad.refresh_from_db()
    assert (bad.status, bad.error_code) == (JobStatus.FAILED, "invalid_keys")
    assert Job.objects.get(pk=good.pk).status == JobStatus.SUCCESSFUL
    [record] = [r for r in caplog.records if getattr(r, "job_id", None) == bad.pk]
    assert record.levelno == logging.ERROR and "invalid_keys" in record.getMessage()


@pytest.fixture
def timed_kind():
    """A kind whose policy reads its payload, as downloads' time limits do."""
    registry.kind("tests.timed_by_payload", max_attempts=3,
                  timeout_s=lambda payload: payload["timeout_s"])(lambda ctx, payload: "ran")
    yield "tests.timed_by_payload"
    registry.unregister("tests.timed_by_payload")


@pytest.mark.parametrize("payload", [{}, ["not", "an", "object"], "text", 7])
def test_a_payload_its_kind_cannot_read_fails_the_job_not_the_worker(run_worker, timed_kind,
                                                                     payload, caplog):
    bad = services.enqueue(timed_kind, {"timeout_s": 5})
    Job.objects.filter(pk=bad.pk).update(payload=payload)
    after = services.enqueue("tests.echo", {"i": 2})
    with caplog.at_level(logging.ERROR, logger="jobs.worker"):
        run_worker(kinds=[timed_kind, "tests.echo"])
    bad.refresh_from_db()
    assert (bad.status, bad.error_code, bad.attempts) == (JobStatus.FAILED, "unstartable", 1)
    assert Job.objects.get(pk=after.pk).status == JobStatus.SUCCESSFUL
    assert f"job {bad.pk} could not start" in caplog.text


def test_a_job_of_a_kind_nobody_serves_is_failed_with_a_log_line(caplog):
    job = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=job.pk).update(kind="gone.kind",
                                         enqueued_at=timezone.now() - timedelta(days=2))
    with caplog.at_level(logging.WARNING, logger="jobs.history"):
        assert reaper.fail_unserved({"tests.noop"}) == 1
    assert Job.objects.get(pk=job.pk).error_code == "unknown_kind"
    [record] = [r for r in caplog.records if r.name == "jobs.history"]
    assert record.levelno == logging.ERROR and record.job_kind == "gone.kind"
    assert "No worker serves this kind of job" in record.getMessage()


def test_a_worker_looks_for_unserved_jobs_every_hundredth_of_their_wait_not_every_reap(fast_engine):
    # Reaps every second; a wait of 300 s is looked at every 3 s, the first time 3 s after start.
    fast_engine.JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS = 300
    job = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=job.pk).update(kind="gone.kind",
                                         enqueued_at=timezone.now() - timedelta(days=2))
    worker = Worker(queues=["default"], kinds=["tests.noop"])
    started = time.monotonic()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.FAILED, timeout=30)
        assert time.monotonic() - started >= 2.9  # three reaps went by without the search
        assert Job.objects.get(pk=job.pk).error_code == "unknown_kind"
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_reap_without_the_unserved_search_leaves_those_jobs_waiting():
    job = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=job.pk).update(kind="gone.kind",
                                         enqueued_at=timezone.now() - timedelta(days=2))
    reaper.reap(unserved=False)
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    reaper.reap()
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
