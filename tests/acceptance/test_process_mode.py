"""Process-mode jobs under a real runworker: stalls, crashes, cancels, kills, shutdowns."""

import os
import signal
import time

import pytest

from jobs import services
from jobs.models import Job, JobStatus
from tests.acceptance.conftest import Ledger, wait_for
from tests.proc import alive

pytestmark = pytest.mark.slow


def row(job):
    # Outside a transaction every query sees the workers' latest commits.
    return Job.objects.get(pk=job.pk)


def pids_of(ledger, job):
    [start] = ledger.events("start", job.pk)
    return [int(p) for p in start[2:3] + start[4:]]


def test_a_finished_child_records_its_own_result(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_sleep", {"ledger": str(ledger.path), "seconds": 0.3})
    spawn_worker()
    wait_for(lambda: row(job).status == JobStatus.SUCCESSFUL)
    [start] = ledger.events("start", job.pk)
    assert row(job).result == {"pid": int(start[2])}
    assert int(start[2]) != os.getpid()


@pytest.mark.serial  # times the watchdog
def test_a_frozen_child_is_killed_as_stalled(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_sleep", {"ledger": str(ledger.path), "seconds": 60})
    spawn_worker()
    wait_for(lambda: ledger.events("start", job.pk))
    [pid] = pids_of(ledger, job)
    os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    wait_for(lambda: row(job).status == JobStatus.FAILED, timeout=20)
    # stall 2 s + poll 0.1 s + grace 1 s, plus the worker's own bookkeeping.
    assert time.monotonic() - frozen_at < 2 + 0.1 + 1 + 3
    assert row(job).error_code == "stalled"
    assert not alive(pid)


def test_a_quiet_step_that_keeps_beating_is_not_a_stall(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_quiet", {"ledger": str(ledger.path), "seconds": 4})
    spawn_worker()
    wait_for(lambda: row(job).is_finished, timeout=30)
    assert row(job).status == JobStatus.SUCCESSFUL, row(job).error


def test_a_crash_is_recorded_with_its_exit_code(spawn_worker, tmp_path):
    job = services.enqueue("tests.proc_crash", {"code": 7})
    spawn_worker()
    wait_for(lambda: row(job).is_finished)
    assert row(job).status == JobStatus.FAILED
    assert row(job).error_code == "crashed"
    assert "exit code 7" in row(job).error


def test_a_child_calling_sys_exit_records_the_failure_with_its_traceback(spawn_worker):
    job = services.enqueue("tests.proc_exit", {"code": 4})
    worker = spawn_worker("--burst")
    assert worker.wait(60) == 0, worker.output()  # a bound on a hang, not a speed target
    failed = row(job)
    assert (failed.status, failed.error, failed.error_code) == (JobStatus.FAILED, "SystemExit: 4", "error")
    assert failed.errors[-1]["exception_class_path"] == "builtins.SystemExit"
    assert "sys.exit(" in failed.errors[-1]["traceback"]


def test_a_child_whose_sigterm_handler_exits_is_still_cancelled_not_failed(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_exits_on_sigterm", {"ledger": str(ledger.path)})
    spawn_worker()
    wait_for(lambda: ledger.events("start", job.pk))
    services.cancel(row(job), reason="test")
    wait_for(lambda: row(job).is_finished, timeout=15)
    assert row(job).status == JobStatus.CANCELLED, row(job).error


def test_cancel_kills_a_child_and_grandchild_that_ignore_sigterm(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_stubborn", {"ledger": str(ledger.path)})
    spawn_worker()
    wait_for(lambda: ledger.events("start", job.pk))
    pid, grandchild = pids_of(ledger, job)
    services.cancel(row(job), reason="test")
    wait_for(lambda: row(job).status == JobStatus.CANCELLED, timeout=15)
    assert not alive(pid) and not alive(grandchild)


@pytest.mark.serial  # times the child's reaction
def test_a_killed_worker_takes_its_children_down(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_sleep", {"ledger": str(ledger.path), "seconds": 60})
    worker = spawn_worker()
    wait_for(lambda: ledger.events("start", job.pk))
    [pid] = pids_of(ledger, job)
    worker.send_signal(signal.SIGKILL)
    worker.wait(5)
    killed_at = time.monotonic()
    wait_for(lambda: not alive(pid))
    # The child hears of its parent's death through a pipe and stops its group.
    assert time.monotonic() - killed_at < 3
    time.sleep(1)
    assert not ledger.events("commit", job.pk)
    assert row(job).status == JobStatus.RUNNING  # until its lease expires and a survivor rescues it


def test_sigterm_stops_four_children_and_requeues_each_once(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    jobs = [services.enqueue("tests.proc_sleep", {"ledger": str(ledger.path), "seconds": 60})
            for _ in range(4)]
    worker = spawn_worker("--concurrency", "4", env={"JOBS_SHUTDOWN_GRACE_SECONDS": "1"})
    wait_for(lambda: len(ledger.events("start")) == 4, timeout=30)
    pids = [int(line[2]) for line in ledger.events("start")]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert not any(alive(pid) for pid in pids)
    for job in jobs:
        r = row(job)
        assert (r.status, r.attempts) == (JobStatus.READY, 0)
        assert list(r.events.values_list("kind", flat=True)) == ["requeued"]


@pytest.mark.serial  # times the heartbeat's reaction
def test_a_child_whose_lease_went_elsewhere_is_stopped_and_writes_nothing(spawn_worker, tmp_path):
    import uuid

    ledger = Ledger(tmp_path / "ledger")
    job = services.enqueue("tests.proc_sleep", {"ledger": str(ledger.path), "seconds": 60})
    spawn_worker()
    wait_for(lambda: ledger.events("start", job.pk))
    [pid] = pids_of(ledger, job)
    # As if the lease had expired and another worker had claimed the job.
    elsewhere = uuid.uuid4()
    Job.objects.filter(pk=job.pk).update(lease_token=elsewhere)
    stolen_at = time.monotonic()
    wait_for(lambda: not alive(pid), timeout=20)
    # heartbeat 1 s + the exit grace 1 s + TERM-to-KILL grace 1 s, plus bookkeeping.
    assert time.monotonic() - stolen_at < 1 + 1 + 1 + 3
    current = row(job)
    assert (current.status, current.lease_token) == (JobStatus.RUNNING, elsewhere)
    assert not ledger.events("commit", job.pk)
