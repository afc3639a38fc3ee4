"""The small tier with a real Redis: CV jobs (redis mode) while Redis restarts empty or stalls.

Each run has a Redis server of its own (the session's is shared with other
tests), two `runcvworker` processes and three runworkers; half the jobs go
through Redis to the CV fleet, whose handler writes the same ledger.
"""

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Load

# The CV transport is the subject; `make chaos` runs these on SQLite too.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.redis, pytest.mark.once]

SMALL = {"workers": 3, "concurrency": 4, "duration_s": 6, "cv_workers": 2}


@pytest.fixture(autouse=True)
def _redis(redis_url):
    """Skip (or fail under REQUIRE_SERVICES) where no Redis is installed."""


def test_a_redis_restart_that_loses_every_key_loses_no_cv_job_and_runs_none_twice_at_once(chaos):
    report = chaos(scenarios.RedisRestart(outage_s=1.0), load=Load(jobs=300), **SMALL)
    assert report.faults["redis_restart"] >= 1, report.describe()
    assert report.cv_executions >= 10, report.describe()
    report.require_ok()


def test_a_redis_stall_past_the_socket_timeout_loses_no_cv_job_and_runs_none_twice_at_once(chaos):
    report = chaos(scenarios.RedisStall(seconds=6), load=Load(jobs=300), **SMALL)
    assert report.faults["redis_stall"] >= 1, report.describe()
    assert report.cv_executions >= 10, report.describe()
    report.require_ok()
