"""The scheduler role under real runworkers: started, restarted, stopped, and one firing a period."""

import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from django_q.models import Failure, Schedule, Success

from jobs.runtime.scheduler import OWNER_ENV
from tests.acceptance.conftest import wait_for
from tests.proc import read_stat

pytestmark = pytest.mark.slow

# django-q2 looks for due schedules every max(30 s, guard cycle); a cycle of
# 30 s makes it look as soon as a cluster starts, so a period takes 30 s here.
LOOK_AT_START = {"SCHEDULER_GUARD_CYCLE_SECONDS": "30", "JOBS_HANDLER_MODULES": "tests.handlers,tests.scheduled"}


def clusters_of(worker_pid):
    """Pids of the scheduler processes a runworker started (the cluster and its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        if f"{OWNER_ENV}={worker_pid}".encode() in environ:
            found.append(int(entry.name))
    return sorted(found)


def cluster_main(worker_pid):
    """The cluster's main process: the one whose parent is the runworker."""
    for pid in clusters_of(worker_pid):
        stat = read_stat(pid)
        if stat is not None and stat[1] == worker_pid:
            return pid
    return None


@pytest.mark.once  # process supervision; the firing test below runs on both
def test_runworker_supervises_its_scheduler(spawn_worker):
    worker = spawn_worker(scheduler=True)
    first = wait_for(lambda: cluster_main(worker.pid), timeout=30)
    assert len(wait_for(lambda: len(clusters_of(worker.pid)) >= 4 and clusters_of(worker.pid))) >= 4

    # A cluster that dies is started again, and what it left behind is swept.
    old = set(clusters_of(worker.pid))
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (pid := cluster_main(worker.pid)) not in (None, first) and pid, timeout=30)
    wait_for(lambda: not old & set(clusters_of(worker.pid)), timeout=10)
    assert second not in old

    # A runworker killed outright takes its scheduler with it.
    wait_for(lambda: len(clusters_of(worker.pid)) >= 4, timeout=30)
    worker.kill()
    worker.wait(10)
    wait_for(lambda: not clusters_of(worker.pid), timeout=15)


@pytest.mark.once  # process supervision; the firing test below runs on both
def test_no_scheduler_starts_none_and_sigterm_stops_it(spawn_worker):
    without = spawn_worker()  # the fixture passes --no-scheduler unless asked
    with_role = spawn_worker(scheduler=True)
    wait_for(lambda: cluster_main(with_role.pid), timeout=30)
    assert "worker" in wait_for(lambda: without.output(), timeout=30)
    assert clusters_of(without.pid) == []

    with_role.send_signal(signal.SIGTERM)
    assert with_role.wait(30) == 0
    assert clusters_of(with_role.pid) == []


def test_two_runworkers_fire_each_schedule_once_a_period(spawn_worker):
    Schedule.objects.all().delete()  # only this test's schedules fire
    due = timezone.now() - timedelta(seconds=1)
    fine = Schedule.objects.create(name="note", func="tests.scheduled.note", args="'a'",
                                   schedule_type=Schedule.MINUTES, minutes=1, next_run=due)
    broken = Schedule.objects.create(name="explode", func="tests.scheduled.explode",
                                     schedule_type=Schedule.MINUTES, minutes=1, next_run=due)
    workers = [spawn_worker(scheduler=True, env=LOOK_AT_START) for _ in range(2)]
    for worker in workers:
        wait_for(lambda worker=worker: cluster_main(worker.pid), timeout=30)

    def fired():
        return (Success.objects.filter(group="note").count(),
                Failure.objects.filter(group="explode").count())

    # Both clusters looked at start; each schedule fired once between them.
    wait_for(lambda: fired() == (1, 1), timeout=40, interval=0.5)
    time.sleep(3)  # the later of the two clusters has looked by now
    assert fired() == (1, 1)
    fine.refresh_from_db()
    assert fine.next_run >= due + timedelta(minutes=1)  # one period on from when it was due
    failure = Failure.objects.get(group="explode")
    assert "this scheduled function always fails" in failure.result

    # The next period comes due (moved closer than a minute to keep the test short):
    # both clusters look again ~30 s after they started, and each schedule fires once more.
    Schedule.objects.filter(pk__in=[fine.pk, broken.pk]).update(next_run=timezone.now())
    wait_for(lambda: fired() == (2, 2), timeout=45, interval=0.5)
    time.sleep(3)
    assert fired() == (2, 2)
    for worker in workers:
        assert worker.poll() is None, worker.output()
