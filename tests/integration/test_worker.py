"""The worker loop in this process: outcomes, retries, timeouts, stops."""

import threading
import time

import pytest

from jobs import services
from jobs.engine import limits, transitions
from jobs.models import Job, JobStatus
from jobs.models import Worker as WorkerRow
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_worker_runs_everything_and_exits(run_worker):
    jobs = [services.enqueue("tests.echo", {"i": i}) for i in range(10)]
    worker = run_worker()
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCESSFUL
        assert job.result == {"echo": job.payload, "attempt": 1}
        assert job.finished_at >= job.started_at
    assert WorkerRow.objects.get(pk=worker.row.pk).stopped_at is not None


def test_handler_failures_retry_then_fail_with_the_exception(run_worker):
    job = services.enqueue("tests.fail_value_error", {})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 2
    assert job.error == "ValueError: bad value"
    assert job.errors[-1]["exception_class_path"] == "builtins.ValueError"
    assert "raise ValueError" in job.errors[-1]["traceback"]


def test_fail_is_not_retried_and_keeps_its_code(run_worker):
    job = services.enqueue("tests.fail_permanent", {})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error_code) == (JobStatus.FAILED, 1, "bad_input")


def test_retry_with_a_delay_waits_for_it(run_worker):
    job = services.enqueue("tests.retry_later", {"delay_s": 3600})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.READY
    assert job.error_code == "busy"
    assert (job.run_after - job.updated_at).total_seconds() > 3500


def test_progress_is_written(run_worker):
    job = services.enqueue("tests.progress", {})
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCESSFUL
    assert job.phase == "step" and job.progress_message == "step 4" and job.progress == 1.0


def test_an_inline_job_past_its_timeout_fails_and_frees_its_slot(run_worker):
    hung = services.enqueue("tests.hang", {"seconds": 4})
    after = services.enqueue("tests.echo", {})
    run_worker(concurrency=1)
    hung.refresh_from_db()
    after.refresh_from_db()
    assert hung.status == JobStatus.FAILED and hung.error_code == "timeout"
    assert after.status == JobStatus.SUCCESSFUL


def test_only_registered_kinds_are_taken(run_worker):
    mine = services.enqueue("tests.echo", {})
    other = services.enqueue("tests.noop", {})
    run_worker(kinds=["tests.echo"])
    assert Job.objects.get(pk=mine.pk).status == JobStatus.SUCCESSFUL
    assert Job.objects.get(pk=other.pk).status == JobStatus.READY


def start_background_worker(fast_engine, **options):
    from jobs.runtime.worker import Worker

    worker = Worker(**options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread




@pytest.mark.parametrize("action,final", [("cancel", JobStatus.CANCELLED), ("pause", JobStatus.PAUSED)])
def test_cancel_and_pause_reach_a_running_handler(fast_engine, action, final):
    job = services.enqueue("tests.sleep_for", {"seconds": 60})
    worker, thread = start_background_worker(fast_engine)
    try:
        assert wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING)
        getattr(services, action)(Job.objects.get(pk=job.pk), reason="test")
        assert wait_until(lambda: Job.objects.get(pk=job.pk).status == final, timeout=5)
    finally:
        worker.request_stop()
        thread.join(10)
    row = Job.objects.get(pk=job.pk)
    assert row.lease_token is None
    assert row.attempts == (0 if action == "pause" else 1)


def test_graceful_stop_requeues_a_running_job_once(fast_engine):
    job = services.enqueue("tests.sleep_for", {"seconds": 60})
    worker, thread = start_background_worker(fast_engine)
    assert wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING)
    worker.request_stop()
    thread.join(15)
    assert not thread.is_alive()
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.READY and row.attempts == 0
    assert list(row.events.values_list("kind", flat=True)) == ["requeued"]


@pytest.mark.postgres
def test_an_idle_worker_wakes_on_notify_not_at_the_next_poll(fast_engine):
    fast_engine.JOBS_POLL_SECONDS = 60  # a poll would take a minute; NOTIFY must not
    worker, thread = start_background_worker(fast_engine)
    try:
        assert wait_until(lambda: WorkerRow.objects.filter(pk=getattr(worker.row, "pk", None)).exists())
        time.sleep(1.5)  # idle now, waiting on its (long) poll
        from jobs.engine import wakeup

        # Only PostgreSQL's NOTIFY may wake it, not this process's own event.
        wakeup.unsubscribe(jobs=worker.wake, stop=worker.stop_check)
        job = services.enqueue("tests.echo", {})
        assert wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCESSFUL, timeout=10)
    finally:
        worker.request_stop()
        thread.join(15)


@pytest.mark.postgres
def test_a_completion_batch_whose_session_died_is_recorded_on_a_fresh_one(run_worker, monkeypatch,
                                                                         tmp_path):
    from django.db import connection

    real = transitions.complete_many
    broken = []

    def session_dies_first(pairs):
        if not broken:
            broken.append(len(pairs))
            connection.connection.close()  # as a terminated session or a failover would
        return real(pairs)

    monkeypatch.setattr(transitions, "complete_many", session_dies_first)
    ledger = tmp_path / "ledger"
    jobs = [services.enqueue("tests.ledger", {"ledger": str(ledger)}) for _ in range(3)]
    run_worker()
    assert broken, "the fault was never injected"
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.SUCCESSFUL, 1)
    # Recorded, not left to expire and run again.
    assert sum(line.startswith("start") for line in ledger.read_text().splitlines()) == 3


@pytest.mark.postgres
def test_a_session_that_dies_during_start_up_does_not_stop_the_worker(run_worker, monkeypatch):
    from django.db import connection

    real = limits.ensure_queues
    broken = []

    def session_dies_first():
        if not broken:
            broken.append(True)
            connection.connection.close()
        return real()

    monkeypatch.setattr(limits, "ensure_queues", session_dies_first)
    job = services.enqueue("tests.echo", {"i": 1})
    worker = run_worker()
    assert broken
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCESSFUL
    assert WorkerRow.objects.filter(name=worker.name).count() == 1  # registered once
