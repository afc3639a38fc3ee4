"""The small tier, on both databases: short chaos runs against real `runworker` processes.

Each test runs one scenario for a few seconds and asks the checker for a
clean verdict; the report (with its seed, for CHAOS_SEED=... replays) is in
the assertion message. The full-size runs are `scripts/chaos`.
"""

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Load

pytestmark = [pytest.mark.slow, pytest.mark.serial]

SMALL = {"workers": 3, "concurrency": 4, "duration_s": 8}


def test_killed_workers_lose_nothing_and_their_jobs_run_again_within_the_bound(chaos):
    report = chaos(scenarios.get("worker_kill"), load=Load(jobs=120), **SMALL)
    assert report.faults["worker_kill"] >= 2, report.describe()
    assert report.recoveries, report.describe()
    report.require_ok()
    if report.database == "sqlite":
        assert report.integrity == "ok", report.describe()


def test_killed_children_leave_no_process_behind_and_their_jobs_run_again(chaos):
    report = chaos(scenarios.get("child_kill"), load=Load(jobs=200), **SMALL)
    assert report.faults["child_kill"] >= 1, report.describe()
    report.require_ok()


def test_a_worker_stopped_past_its_lease_writes_nothing_stale_when_it_wakes(chaos):
    report = chaos(scenarios.get("worker_stop"), load=Load(jobs=120), **SMALL)
    assert report.faults["worker_stop"] >= 1, report.describe()
    report.require_ok()
