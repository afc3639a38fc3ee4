"""A worker cut off from PostgreSQL, not killed, stops its jobs before another worker may start
them (jobs/runtime/fence.py).

One worker reaches the database through a TCP proxy that black-holes its
connections on command (kept open, no bytes either way: a dropped route, a
frozen server); a second connects directly and takes the job over once the
lease has run out. The handlers note a wall-clock tick every 50 ms, so each
execution's last tick says when it really stopped.
"""

from collections import defaultdict
from pathlib import Path

import pytest
from django.db import connection

from jobs import services
from jobs.models import Job, JobStatus
from jobs.runtime import fence
from tests.acceptance.conftest import FAST, wait_for
from tests.chaos.proxy import Proxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LEASE_S = float(FAST["JOBS_LEASE_SECONDS"])
TICK_S = 0.05


def executions(path):
    """{(attempt, pid): [start, last tick or end]} from a ticks file."""
    seen = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        what, _job, attempt, pid, at = line.split()
        seen[(int(attempt), int(pid))].append((what, float(at)))
    return {key: (marks[0][1], marks[-1][1]) for key, marks in seen.items()}


@pytest.fixture
def cut_off(spawn_worker):
    """Start a worker whose database connections go through a proxy; returns (proxy, proc)."""
    settings = connection.settings_dict
    proxy = Proxy((settings["HOST"], int(settings["PORT"]))).start()

    def start(**env):
        url = f"postgres://{settings['USER']}@127.0.0.1:{proxy.port}/{settings['NAME']}"
        return spawn_worker("--concurrency", "2", env={"DATABASE_URL": url, **env})

    yield proxy, start
    proxy.close()


def run_cut(proxy, start_cut, spawn_worker, tmp_path, kind, payload, **env):
    """The job starts on the cut-off worker; its database is black-holed; a second worker takes
    the job over. Returns (job, the executions, the cut-off worker's process)."""
    ticks = tmp_path / "ticks"
    worker = start_cut(**env)
    job = services.enqueue(kind, {"ledger": str(ticks), **payload})
    wait_for(lambda: ticks.exists() and "tick" in ticks.read_text(), timeout=30)
    proxy.partition()
    spawn_worker("--concurrency", "2")
    wait_for(lambda: len(executions(ticks)) >= 2, timeout=30)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.SUCCESSFUL, timeout=30)
    return job, ticks, worker


def assert_no_overlap(ticks):
    runs = sorted(executions(ticks).items())
    (first_key, (first_start, first_last)), (second_key, (second_start, _)) = runs[:2]
    assert first_key[1] != second_key[1], "the replacement ran on another worker"
    # The cut-off execution's last sign of work came before its replacement's start.
    assert first_last + TICK_S < second_start, runs
    return first_last, second_start


@pytest.mark.parametrize("kind", ["tests.fenced", "tests.proc_fenced"])
def test_a_cut_off_worker_stops_its_job_before_another_worker_starts_it(
        kind, cut_off, spawn_worker, tmp_path):
    proxy, start_cut = cut_off
    job, ticks, worker = run_cut(proxy, start_cut, spawn_worker, tmp_path, kind,
                                 {"seconds": [60, 0.2]})
    assert_no_overlap(ticks)
    assert worker.poll() is None, "a handler that stops leaves its worker running"
    assert "stopping 1 job(s) whose leases lapse in" in worker.output()
    ended = Job.objects.get(pk=job.pk)
    assert (ended.status, ended.attempts) == (JobStatus.SUCCESSFUL, 2)

    # Healed by a reset: the cut-off worker comes back and writes nothing of the old attempt.
    lines = ticks.read_text()
    proxy.heal(reset=True)
    wait_for(lambda: "leases renewed again" in worker.output(), timeout=30)
    assert ticks.read_text() == lines
    assert Job.objects.get(pk=job.pk).updated_at == ended.updated_at


def test_an_inline_handler_that_will_not_stop_ends_its_worker_instead(
        cut_off, spawn_worker, tmp_path):
    proxy, start_cut = cut_off
    job, ticks, worker = run_cut(proxy, start_cut, spawn_worker, tmp_path, "tests.fenced",
                                 {"seconds": [60, 0.2], "ignore_stop": True})
    assert wait_for(lambda: worker.poll() is not None, timeout=10)
    assert worker.returncode == fence.EXIT_CODE, worker.output()
    assert "ends itself" in worker.output()
    assert_no_overlap(ticks)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCESSFUL
