"""The small tier, on both databases: short chaos runs against real `runworker` processes.

Each test runs one scenario for a few seconds and asks the checker for a
clean verdict; the report (with its seed, for CHAOS_SEED=... replays) is in
the assertion message. The full-size runs are `scripts/chaos`.
"""

import pytest
from django.db import connection

from tests.chaos import scenarios
from tests.chaos.harness import Load
from tests.servers import need, pgbouncer_admin, pooled_url, release_pooled

pytestmark = [pytest.mark.slow, pytest.mark.serial]

SMALL = {"workers": 3, "concurrency": 4, "duration_s": 8}


def test_killed_workers_lose_nothing_and_their_jobs_run_again_within_the_bound(chaos):
    report = chaos(scenarios.get("worker_kill"), load=Load(jobs=120), **SMALL)
    assert report.faults["worker_kill"] >= 2, report.describe()
    assert report.recoveries, report.describe()
    report.require_ok()
    if report.database == "sqlite":
        assert report.integrity == "ok", report.describe()


@pytest.mark.postgres
def test_killed_workers_behind_pgbouncer_lose_nothing_and_never_overlap(chaos):
    """Every worker connection through PgBouncer in transaction pooling, no direct LISTEN
    (they poll): nothing in the engine may lean on a session."""
    url = pooled_url(connection)
    need("PgBouncer (TEST_PGBOUNCER_PORT)", url is not None)
    name = connection.settings_dict["NAME"]
    try:
        report = chaos(scenarios.get("worker_kill"), load=Load(jobs=120), database_url=url,
                       worker_env={"DATABASE_POOLER": "transaction", "JOBS_LISTEN_DATABASE_URL": ""},
                       **SMALL)
        stats = {row["database"]: row for row in pgbouncer_admin("SHOW STATS")}
    finally:
        release_pooled(name)  # the test database is dropped at the end: nothing may hold it
    assert report.faults["worker_kill"] >= 2, report.describe()
    assert stats[name]["total_xact_count"] > 100, stats.get(name)
    assert not report.lost and not report.overlaps, report.describe()
    report.require_ok()


def test_killed_children_leave_no_process_behind_and_their_jobs_run_again(chaos):
    report = chaos(scenarios.get("child_kill"), load=Load(jobs=200), **SMALL)
    assert report.faults["child_kill"] >= 1, report.describe()
    report.require_ok()


def test_a_worker_stopped_past_its_lease_writes_nothing_stale_when_it_wakes(chaos):
    report = chaos(scenarios.get("worker_stop"), load=Load(jobs=120), **SMALL)
    assert report.faults["worker_stop"] >= 1, report.describe()
    report.require_ok()
