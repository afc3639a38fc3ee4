"""Real `manage.py runcvworker` processes against a real Redis: kills, signals, outages."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from jobs.cv import clients
from jobs.cv.transport import CVConfig, Transport
from tests.cv_handlers import WARMUP_MARKER_ENV, WARMUP_S_ENV
from tests.integration.test_transport import RedisServer, ledger_lines, states
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.dbless]

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_TTL_S = 1.5
HEARTBEAT_INTERVAL_S = 0.4


class WorkerProcess:
    """One `manage.py runcvworker` child; its output goes to a log file."""

    def __init__(self, *, url, prefix, folder, name, types, concurrency=1, env=None):
        self.worker_id = f"{prefix}-{name}"
        self.log_path = folder / f"{name}.log"
        environment = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
        environment.update({
            "REDIS_URL": url,
            "CV_REDIS_PREFIX": prefix,
            "JOBS_HANDLER_MODULES": "tests.cv_handlers",
            "MEDIA_ROOT": str(folder / "media"),
            "CV_HEARTBEAT_TTL_S": str(HEARTBEAT_TTL_S),
            "CV_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_INTERVAL_S),
            "CV_SHUTDOWN_GRACE_S": "1",
            "LOG_LEVEL": "INFO",
            **(env or {}),
        })
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "runcvworker", "--types", ",".join(types),
                 "--concurrency", str(concurrency), "--worker-id", self.worker_id],
                cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
            )

    @property
    def pid(self):
        return self.process.pid

    def log(self):
        return self.log_path.read_text(errors="replace")

    def send(self, signum):
        self.process.send_signal(signum)

    def wait(self, timeout_s):
        return self.process.wait(timeout_s)

    @staticmethod
    def kill_survivors(workers):
        """A test's teardown: kill the workers still running."""
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait(10)


@pytest.fixture
def cv_workers(tmp_path):
    """Starts worker processes; kills any still running after the test."""
    started = []

    def start(**options):
        worker = WorkerProcess(folder=tmp_path, **options)
        started.append(worker)
        return worker

    yield start
    WorkerProcess.kill_survivors(started)


@pytest.fixture
def channel(redis_url):
    config = CVConfig(prefix=f"p{uuid.uuid4().hex[:10]}", heartbeat_ttl_s=HEARTBEAT_TTL_S,
                      heartbeat_interval_s=HEARTBEAT_INTERVAL_S)
    client = clients.build_client(redis_url)
    yield Transport(client, config=config)
    client.close()


def heartbeat(channel, worker):
    return channel.client.get(channel.worker_key(worker.worker_id))


def wait_ready(channel, worker, timeout=30):
    wait_for(lambda: heartbeat(channel, worker) or worker.process.poll() is not None, timeout)
    assert worker.process.poll() is None, worker.log()


def test_a_worker_killed_mid_job_loses_nothing_and_the_result_is_written_once(
        channel, cv_workers, redis_url, tmp_path):
    ledger = tmp_path / "ledger"
    pair = [cv_workers(url=redis_url, prefix=channel.prefix, name=name, types=["sleep_for"])
            for name in ("one", "two")]
    for worker in pair:
        wait_ready(channel, worker)
    channel.publish("sleep_for", "k1", 1, {"seconds": 1.5, "ledger": str(ledger)})
    wait_for(lambda: ledger_lines(ledger, "start"))
    [taker] = [w for w in pair if w.pid == int(ledger_lines(ledger, "start")[0][3])]
    [other] = [w for w in pair if w is not taker]
    taker.send(signal.SIGKILL)
    taker.wait(10)
    # Not lost: it sits in the dead worker's processing list until its heartbeat expires.
    assert channel.client.llen(channel.processing_key(taker.worker_id)) == 1
    assert channel.is_pending("k1", 1)

    wait_for(lambda: states(channel, ["k1"])["k1"] == "done", timeout=30)
    starts = ledger_lines(ledger, "start")
    finishes = ledger_lines(ledger, "finish")
    assert [int(line[3]) for line in starts] == [taker.pid, other.pid]
    assert len(finishes) == 1 and int(finishes[0][3]) == other.pid
    result = json.loads((tmp_path / "media" / channel.status("k1")["result"]).read_text())
    assert result == {"pid": other.pid, "run": finishes[0][4]}
    assert f"returned 1 CV job(s) held by dead worker {taker.worker_id}" in other.log()
    assert channel.client.keys(f"{channel.prefix}:processing:*") == []


def test_the_heartbeat_appears_only_after_warm_up_and_goes_on_sigterm(
        channel, cv_workers, redis_url, tmp_path):
    marker = tmp_path / "warmup"
    worker = cv_workers(
        url=redis_url, prefix=channel.prefix, name="w", types=["sleep_for", "noop"],
        # A long TTL: the key must vanish on exit because it is deleted, not because it expired.
        env={WARMUP_S_ENV: "1", WARMUP_MARKER_ENV: str(marker), "CV_HEARTBEAT_TTL_S": "60"},
    )
    wait_for(lambda: marker.exists(), timeout=30)
    samples = []
    while "warmup-done" not in marker.read_text():
        samples.append(heartbeat(channel, worker))
        time.sleep(0.1)
    assert len(samples) >= 3 and not any(samples)
    wait_ready(channel, worker)
    beat = json.loads(heartbeat(channel, worker))
    assert beat["pid"] == worker.pid and beat["types"] == ["sleep_for", "noop"]
    channel.publish("noop", "n1", 1, {})
    wait_for(lambda: states(channel, ["n1"])["n1"] == "done")

    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    assert heartbeat(channel, worker) is None
    assert "stopped" in worker.log()


def test_the_heartbeat_outlives_a_busy_job_longer_than_its_ttl(channel, cv_workers, redis_url):
    worker = cv_workers(url=redis_url, prefix=channel.prefix, name="w", types=["sleep_for"])
    wait_ready(channel, worker)
    job_s = 3 * HEARTBEAT_TTL_S  # 4.5 s
    channel.publish("sleep_for", "long", 1, {"seconds": job_s, "busy": True})
    wait_for(lambda: states(channel, ["long"])["long"] == "running")
    samples = []
    while states(channel, ["long"])["long"] == "running":
        samples.append(heartbeat(channel, worker))
        time.sleep(0.5)
    assert len(samples) >= 2 * job_s - 3
    assert all(samples), f"heartbeat missing at samples {[i for i, s in enumerate(samples) if not s]}"
    assert all(json.loads(s)["jobs"] in (["long"], []) for s in samples)
    assert states(channel, ["long"])["long"] == "done"


def test_a_worker_rides_out_a_redis_outage_and_serves_when_it_returns(cv_workers, tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    client = clients.build_client(server.url)
    channel = Transport(client, config=CVConfig(prefix="outage"))
    try:
        worker = cv_workers(url=server.url, prefix="outage", name="w", types=["noop"], concurrency=2)
        wait_ready(channel, worker)
        server.kill()
        time.sleep(2)
        assert worker.process.poll() is None, worker.log()
        server.start()  # same port, empty
        wait_ready(channel, worker)
        channel.publish("noop", "after", 1, {"echo": "back"})
        wait_for(lambda: states(channel, ["after"])["after"] == "done")
        log = worker.log()
        assert "Redis error, retrying" in log and "Redis is reachable again" in log
        assert "Traceback" not in log
    finally:
        client.close()
        server.kill()


def test_sigterm_hands_back_jobs_that_do_not_finish_within_the_grace(
        channel, cv_workers, redis_url, tmp_path):
    ledger = tmp_path / "ledger"
    worker = cv_workers(url=redis_url, prefix=channel.prefix, name="w", types=["sleep_for"], concurrency=2)
    wait_ready(channel, worker)
    channel.publish("sleep_for", "polite", 1, {"seconds": 60, "ledger": str(ledger)})
    channel.publish("sleep_for", "stubborn", 1, {"seconds": 60, "ledger": str(ledger), "cooperative": False})
    wait_for(lambda: len(ledger_lines(ledger, "start")) == 2)

    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    # Both back in the queue, claimable again, and their status says why.
    assert channel.queue_lengths(["sleep_for"]) == {"sleep_for": 2}
    for job_id in ["polite", "stubborn"]:
        status = channel.status(job_id)
        assert status["state"] == "queued" and status["message"].startswith("Handed back")
        assert not channel.client.exists(channel.seen_key(job_id, 1))
    assert [line[1] for line in ledger_lines(ledger, "stopped")] == ["polite"]
    assert ledger_lines(ledger, "finish") == []
    assert channel.client.llen(channel.processing_key(worker.worker_id)) == 0
    assert heartbeat(channel, worker) is None
