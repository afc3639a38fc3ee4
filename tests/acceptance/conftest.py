import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.servers import database_url
from tests.waiting import wait_for  # noqa: F401 - imported from here by the tests

ROOT = Path(__file__).resolve().parents[2]

# Short timings, so recovery takes seconds: lease 3 s, heartbeat 1 s, rescue 1 s, poll 0.5 s.
FAST = {
    "JOBS_LEASE_SECONDS": "3",
    "JOBS_HEARTBEAT_SECONDS": "1",
    "JOBS_RESCUE_INTERVAL_SECONDS": "1",
    "JOBS_POLL_SECONDS": "0.5",
    "JOBS_SHUTDOWN_GRACE_SECONDS": "2",
    "JOBS_PROGRESS_INTERVAL_SECONDS": "0",
}
RECOVERY_BOUND_S = 3 + 1 + 0.5  # lease + rescue interval + poll (+ backoff: tests.ledger has none)


@pytest.fixture
def spawn_worker(transactional_db, tmp_path):
    """Start real `manage.py runworker` processes on the test database; all are killed afterwards."""
    procs = []

    def spawn(*args, env=None, scheduler=False):
        log = open(tmp_path / f"worker-{len(procs)}.log", "w")
        role = [] if scheduler else ["--no-scheduler"]  # most tests are about the queue alone
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", *role, *args],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url(connection),
                 "JOBS_HANDLER_MODULES": "tests.handlers", **FAST, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        proc.output = lambda: Path(log.name).read_text()
        procs.append(proc)
        return proc

    yield spawn
    for number, proc in enumerate(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        # Shown with a failing test's report: what each worker said.
        print(f"--- runworker {number} (pid {proc.pid}) ---\n{proc.output()[-6000:]}")




class Ledger:
    """The lines tests.ledger handlers append: (event, job id, attempt, token, pid[, reason])."""

    def __init__(self, path):
        self.path = Path(path)

    def lines(self):
        if not self.path.exists():
            return []
        return [line.split() for line in self.path.read_text().splitlines() if line.strip()]

    def events(self, event, job_id=None):
        return [line for line in self.lines() if line[0] == event and (job_id is None or line[1] == str(job_id))]
