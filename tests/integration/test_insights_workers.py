"""Two real `manage.py runworker` processes share one gateway: never more than one call at once."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from insights import conf, services
from insights.models import Insight, InsightKind
from jobs import services as jobs
from jobs.models import Job, JobStatus
from tests.gateway import FakeGateway, Reply
from tests.integration.test_insights import make_asset
from tests.servers import database_url
from tests.waiting import PATIENCE

ROOT = Path(__file__).resolve().parents[2]
FAST = {"JOBS_LEASE_SECONDS": "5", "JOBS_HEARTBEAT_SECONDS": "1", "JOBS_RESCUE_INTERVAL_SECONDS": "1",
        "JOBS_POLL_SECONDS": "0.2", "JOBS_SHUTDOWN_GRACE_SECONDS": "2"}


@pytest.fixture
def spawn_worker(transactional_db, tmp_path):
    """Start `manage.py runworker` processes on the test database; all are killed afterwards."""
    procs = []

    def spawn(*args, env):
        log_path = tmp_path / f"worker-{len(procs)}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--no-scheduler", *args], cwd=ROOT,
                env={**os.environ, "DATABASE_URL": database_url(connection), **FAST, **env},
                stdout=log, stderr=subprocess.STDOUT)
        proc.output = log_path.read_text
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.mark.serial  # two workers racing for one gateway slot, timed by the gateway's log
def test_two_worker_processes_never_call_the_gateway_twice_at_once(spawn_worker, user, settings):
    with FakeGateway() as gateway:
        settings.INSIGHTS_GATEWAY_URL = gateway.url  # the requests go to the gateway's queue
        settings.INSIGHTS_USER_QUEUED = 6
        gateway.default = Reply(delay_s=0.4)  # slow enough that a second call would overlap
        jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
        insights = [services.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY,
                                             subject=make_asset(user, f"Clip {i}").pk)
                    for i in range(6)]
        env = {"INSIGHTS_GATEWAY_URL": gateway.url, "INSIGHTS_MODEL": "fake-model"}
        # Each process would run three at once if the queue's global limit let it.
        workers = [spawn_worker("--queues", conf.QUEUE, "--concurrency", "3", "--burst",
                                "--worker-id", f"w{i}", env=env) for i in range(2)]
        for proc in workers:
            assert proc.wait(60 * PATIENCE) == 0, proc.output()

    assert len(gateway.completed()) == 6
    assert gateway.max_in_flight == 1
    spans = sorted((seen.started_at, seen.ended_at) for seen in gateway.requests)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False))
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCESSFUL}
    assert {i.text for i in Insight.objects.filter(pk__in=[i.pk for i in insights])} == {
        f"Generated text #{n}." for n in range(1, 7)}
