"""Real `manage.py runworker` processes: kills, stops, signals and restarts."""

import os
import signal
import time

import pytest
from django.db import connection
from django.tasks import TaskResultStatus, default_task_backend

from jobs import services
from jobs.models import Job, JobStatus, Worker
from tests import tasks
from tests.acceptance.conftest import RECOVERY_BOUND_S, Ledger, wait_for
from tests.freezing import freeze

pytestmark = pytest.mark.slow


def status(job):
    # Outside a transaction every query sees the workers' latest commits.
    return Job.objects.get(pk=job.pk)


@pytest.mark.serial  # times the recovery bound
def test_a_worker_killed_mid_job_has_its_job_run_again_within_the_lease(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    # The first attempt works until it is killed, however long the second
    # worker takes to start; the rescued one finishes at once.
    job = services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": [120, 0]})
    first = spawn_worker("--worker-id", "first")
    wait_for(lambda: ledger.events("start", job.pk))
    # The survivor is up before the kill, as on a real fleet: what is timed is
    # the recovery, not a Python process starting.
    spawn_worker("--worker-id", "second")
    wait_for(lambda: Worker.objects.filter(name="second", stopped_at__isnull=True).exists())
    first.send_signal(signal.SIGKILL)
    first.wait(5)
    killed_at = time.monotonic()
    wait_for(lambda: len(ledger.events("start", job.pk)) == 2, timeout=30)
    recovered_in = time.monotonic() - killed_at
    # A correctness bound, not a speed target: the lease promises this much.
    assert recovered_in < RECOVERY_BOUND_S + 3, recovered_in
    wait_for(lambda: status(job).status == JobStatus.SUCCESSFUL, timeout=20)
    assert len(ledger.events("commit", job.pk)) == 1
    row = status(job)
    assert row.attempts == 2
    assert row.worker_ids == ["first", "second"]
    assert row.events.filter(kind="expired").count() == 1


def test_starting_a_second_worker_does_not_touch_the_first_ones_job(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": 6})
    first = spawn_worker("--worker-id", "first")
    wait_for(lambda: ledger.events("start", job.pk))
    spawn_worker("--worker-id", "second")
    wait_for(lambda: status(job).status == JobStatus.SUCCESSFUL, timeout=30)
    [start] = ledger.events("start", job.pk)
    [commit] = ledger.events("commit", job.pk)
    assert start[4] == commit[4] == str(first.pid)
    assert status(job).worker_ids == ["first"]


def test_a_stopped_worker_past_its_lease_cannot_write_when_it_wakes(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": 4})
    first = spawn_worker("--worker-id", "first")
    wait_for(lambda: ledger.events("start", job.pk))
    freeze(first.pid)  # between transactions: on SQLite a frozen writer stops every writer
    second = spawn_worker("--worker-id", "second")
    wait_for(lambda: len(ledger.events("start", job.pk)) == 2, timeout=30)
    first.send_signal(signal.SIGCONT)
    wait_for(lambda: status(job).status == JobStatus.SUCCESSFUL, timeout=30)
    time.sleep(2)  # give the woken worker every chance to write what it would
    row = status(job)
    assert row.result == {"pid": second.pid}
    assert row.worker_ids == ["first", "second"]
    assert row.status == JobStatus.SUCCESSFUL
    assert first.poll() is None, "the woken worker must carry on serving"


def test_graceful_sigterm_requeues_the_running_job_exactly_once(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": 60})
    worker = spawn_worker()
    wait_for(lambda: ledger.events("start", job.pk))
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    row = status(job)
    assert row.status == JobStatus.READY
    assert row.attempts == 0
    assert list(row.events.values_list("kind", flat=True)) == ["requeued"]
    assert [line[-1] for line in ledger.events("stopped", job.pk)] == ["requeued"]


def test_a_worker_waits_for_migrations_instead_of_crashing(spawn_worker, tmp_path):
    empty = tmp_path / "empty.sqlite3"
    worker = spawn_worker(env={"DATABASE_URL": f"sqlite:///{empty}"})
    wait_for(lambda: "waiting: migrations are not applied yet" in worker.output())
    time.sleep(1)
    assert worker.poll() is None, worker.output()


@pytest.mark.serial
@pytest.mark.postgres
def test_a_postgresql_restart_mid_run_loses_nothing(spawn_worker, tmp_path, pg_server):
    ledger = Ledger(tmp_path / "ledger")
    jobs = [services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": 0.3})
            for _ in range(30)]
    worker = spawn_worker("--concurrency", "2")
    wait_for(lambda: len(ledger.events("commit")) >= 4)
    connection.close()
    pg_server.stop("immediate")
    time.sleep(3)
    pg_server.start()
    wait_for(lambda: all(status(j).status == JobStatus.SUCCESSFUL for j in jobs), timeout=60)
    assert worker.poll() is None
    committed = {line[1] for line in ledger.events("commit")}
    assert committed == {str(j.pk) for j in jobs}


def test_the_worker_survives_a_bad_job_and_keeps_its_threads(spawn_worker):
    bad = [services.enqueue("tests.fail_permanent", {}) for _ in range(5)]
    good = [services.enqueue("tests.echo", {}) for _ in range(5)]
    worker = spawn_worker("--concurrency", "2")
    wait_for(lambda: all(status(j).is_finished for j in bad + good), timeout=30)
    assert all(status(j).status == JobStatus.SUCCESSFUL for j in good)
    assert worker.poll() is None
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(20) == 0


def test_a_task_calling_sys_exit_fails_with_its_traceback_and_burst_still_exits(spawn_worker):
    exited = tasks.exits.enqueue(3)
    after = tasks.add.enqueue(2, 3)
    worker = spawn_worker("--burst", "--concurrency", "1")
    # A bound on a hang, not a speed target: the worker used to renew the
    # dead thread's lease and never exit.
    assert worker.wait(60) == 0, worker.output()
    result = default_task_backend.get_result(exited.id)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class is SystemExit
    assert "sys.exit(code)" in result.errors[-1].traceback
    assert result.errors[-1].traceback.endswith("SystemExit: 3\n")
    assert Job.objects.get(public_id=exited.id).lease_expires_at is None
    assert tasks.add.get_result(after.id).return_value == 5
