"""The CV transport against a real Redis, with CV workers running in threads."""

import json
import logging
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from jobs.cv import clients
from jobs.cv.transport import (
    Admission,
    CVConfig,
    MessageTooLarge,
    Transport,
    encode_message,
    parse_message,
)
from jobs.cv.worker import CVWorker, start_embedded_worker
from tests import cv_handlers  # noqa: F401 - registers the test handlers
from tests.servers import need
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.dbless]

# Short enough that a dead worker is noticed within a test's patience.
FAST = dict(heartbeat_ttl_s=2, heartbeat_interval_s=0.5, shutdown_grace_s=1)


class RedisServer:
    """A private redis-server on a free loopback port, which a test may stop and restart."""

    def __init__(self, folder):
        need("redis-server", shutil.which("redis-server"))
        self.folder = folder
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None

    def start(self):
        # No persistence: a restart comes back empty, like a cache node that lost its data.
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start within 10 s")

    def kill(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def restart(self):
        self.kill()
        self.start()


@pytest.fixture
def private_redis(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def channel(redis_url):
    """A Transport on the shared test Redis with a prefix of its own, and its config."""
    config = CVConfig(prefix=f"t{uuid.uuid4().hex[:10]}", **FAST)
    client = clients.build_client(redis_url)
    yield Transport(client, config=config)
    client.close()


@pytest.fixture
def workers():
    """Starts CV workers in threads; stops every one of them after the test."""
    started = []

    def start(**options):
        worker = start_embedded_worker(**options)
        started.append(worker)
        assert worker.ready.wait(10), "the CV worker never became ready"
        return worker

    yield start
    for worker in started:
        worker.request_stop()
    for worker in started:
        assert worker.exited.wait(15), "a CV worker did not stop"




def states(transport, job_ids):
    return {job_id: (transport.status(job_id) or {}).get("state") for job_id in job_ids}


def huge_message(job_id, size):
    blob = "x" * (size - len(encode_message("noop", job_id, 1, {"blob": ""})))
    raw = encode_message("noop", job_id, 1, {"blob": blob})
    assert len(raw) == size
    return raw


def ledger_lines(path, event=None):
    if not path.exists():
        return []
    lines = [line.split() for line in path.read_text().splitlines()]
    return [line for line in lines if event is None or line[0] == event]


# --- Jobs, progress, results ------------------------------------------------------


def test_a_job_reports_progress_and_its_result_is_a_file(channel, workers, redis_url, media):
    workers(types=["write_progress", "noop"], concurrency=2, url=redis_url, config=channel.config)
    channel.publish("write_progress", "p1", 1, {"steps": 4, "step_s": 0.4})
    channel.publish("noop", "n1", 3, {"echo": "héllo"})
    seen = set()

    def finished():
        status = channel.status("p1")
        seen.add((status["state"], status["fraction"], status["phase"]))
        return status["state"] == "done"

    wait_for(finished, interval=0.1)
    assert any(state == "running" and 0 < fraction < 1 and phase == "counting"
               for state, fraction, phase in seen), seen
    status = channel.status("p1")
    assert status["result"] == "cv/p1/1.json"
    assert (status["fraction"], status["message"]) == (1.0, "step 4 of 4")
    assert json.loads((media / status["result"]).read_text()) == {"steps": 4}
    wait_for(lambda: states(channel, ["n1"])["n1"] == "done")
    assert json.loads((media / "cv/n1/3.json").read_text()) == {"echo": "héllo"}
    # Nothing is left in flight and no temporary files are left behind.
    assert channel.client.keys(f"{channel.prefix}:processing:*") == []
    assert sorted(p.name for p in (media / "cv/p1").iterdir()) == ["1.json"]


def test_a_handler_exception_fails_the_job_with_its_code(channel, workers, redis_url, media):
    workers(types=["fail"], url=redis_url, config=channel.config)
    channel.publish("fail", "f1", 1, {"coded": True})
    channel.publish("fail", "f2", 2, {"message": "bad frame"})
    wait_for(lambda: set(states(channel, ["f1", "f2"]).values()) == {"failed"})
    assert (channel.status("f1")["error_code"], channel.status("f1")["error"]) == ("broken_clip", "the clip is broken")
    assert (channel.status("f2")["error_code"], channel.status("f2")["error"]) == ("ValueError", "bad frame")
    assert not (media / "cv/f1/1.json").exists()


# --- Poison messages ----------------------------------------------------------------


def test_poison_messages_are_dead_lettered_and_good_ones_served(channel, workers, redis_url, media):
    worker = workers(types=["noop", "fail"], concurrency=1, url=redis_url, config=channel.config)
    queue = channel.queue_key("noop")
    good = [encode_message("noop", f"good{n}", 1, {"echo": n}) for n in range(3)]
    poison = {
        "not JSON": "{this is not json",
        "not UTF-8 text": b"\xff\xfe\x00binary",
        "unsupported version 2 (this worker reads 1)":
            json.dumps({"v": 2, "job_id": "v2", "attempt": 1, "type": "noop", "payload": {}}),
        "unknown type 'nosuch'":
            json.dumps({"v": 1, "job_id": "u1", "attempt": 1, "type": "nosuch", "payload": {}}),
        "type 'fail' in the 'noop' queue":
            json.dumps({"v": 1, "job_id": "w1", "attempt": 1, "type": "fail", "payload": {}}),
        "missing fields: attempt, payload": json.dumps({"v": 1, "job_id": "m1", "type": "noop"}),
        "too large: 300100 bytes, the limit is 262144": huge_message("big", 300100),
    }
    # Oldest first: good0, every poison message, good1, good2.
    channel.client.lpush(queue, good[0], *poison.values(), good[1], good[2])
    wait_for(lambda: set(states(channel, [f"good{n}" for n in range(3)]).values()) == {"done"})
    wait_for(lambda: len(channel.dead_letters()) == len(poison))
    letters = channel.dead_letters()
    assert sorted(letter["reason"] for letter in letters) == sorted(poison)
    assert all(letter["worker"] == worker.worker_id for letter in letters)
    big = next(letter for letter in letters if letter["reason"].startswith("too large"))
    assert big["bytes"] == 300100 and len(big["raw"]) == 4096
    # A rejected message whose job is known fails that job, so the engine stops waiting.
    assert channel.status("v2")["state"] == "failed" and channel.status("v2")["error_code"] == "rejected"
    assert channel.client.llen(channel.processing_key(worker.worker_id)) == 0
    # The worker is still serving.
    channel.publish("noop", "after", 1, {})
    wait_for(lambda: states(channel, ["after"])["after"] == "done")


def test_parse_message_rejects_bad_fields_before_they_reach_a_path():
    for job_id in ["../etc", ".hidden", "a/b", "", 7]:
        raw = json.dumps({"v": 1, "job_id": job_id, "attempt": 1, "type": "noop", "payload": {}})
        with pytest.raises(ValueError, match="bad job_id"):
            parse_message(raw, max_bytes=1000)
    for attempt in [0, "1", True, 1.0]:
        raw = json.dumps({"v": 1, "job_id": "j", "attempt": attempt, "type": "noop", "payload": {}})
        with pytest.raises(ValueError, match="bad attempt"):
            parse_message(raw, max_bytes=1000)
    raw = json.dumps({"v": 1, "job_id": "j", "attempt": 1, "type": "noop", "payload": []})
    with pytest.raises(ValueError, match="payload is not a JSON object"):
        parse_message(raw, max_bytes=1000)


def test_publish_refuses_oversized_messages_and_bad_names(channel):
    with pytest.raises(MessageTooLarge):
        channel.publish("noop", "j1", 1, {"blob": "x" * 262144})
    with pytest.raises(ValueError):
        channel.publish("noop", "../j1", 1, {})
    with pytest.raises(ValueError):
        channel.publish("noop", "j1", 0, {})
    assert channel.queue_lengths(["noop"]) == {"noop": 0}
    assert channel.status("j1") is None


# --- Duplicates, cancel ---------------------------------------------------------------


def test_a_duplicate_delivery_of_an_attempt_runs_once(channel, workers, redis_url, media, tmp_path):
    ledger = tmp_path / "ledger"
    workers(types=["sleep_for"], concurrency=3, url=redis_url, config=channel.config)
    payload = {"seconds": 0.5, "ledger": str(ledger)}
    for _ in range(3):
        channel.publish("sleep_for", "d1", 1, payload)
    wait_for(lambda: states(channel, ["d1"])["d1"] == "done")
    # A late duplicate of the finished attempt (published after it is done) is dropped too.
    channel.client.lpush(channel.queue_key("sleep_for"), encode_message("sleep_for", "d1", 1, payload))
    wait_for(lambda: channel.queue_lengths(["sleep_for"]) == {"sleep_for": 0})
    time.sleep(0.3)
    assert len(ledger_lines(ledger, "start")) == 1
    # A new attempt of the same job is not a duplicate.
    channel.publish("sleep_for", "d1", 2, payload)
    wait_for(lambda: (channel.status("d1") or {}).get("attempt") == 2 and channel.status("d1")["state"] == "done")
    assert [line[2] for line in ledger_lines(ledger, "start")] == ["1", "2"]


def test_claim_lets_exactly_one_taker_of_an_attempt_run_it(channel):
    message = parse_message(encode_message("noop", "c1", 1, {}), max_bytes=1000)
    assert channel.admit(message, "w1:first") is Admission.RUN
    # The same claim retried (its reply was lost) still wins...
    assert channel.admit(message, "w1:first") is Admission.RUN
    # ...but another delivery does, even to the same worker.
    assert channel.admit(message, "w2:other") is Admission.DUPLICATE
    assert channel.admit(message, "w1:second") is Admission.DUPLICATE


def test_cancel_stops_a_running_job_and_a_queued_one_never_starts(channel, workers, redis_url, media, tmp_path):
    ledger = tmp_path / "ledger"
    workers(types=["sleep_for"], concurrency=2, url=redis_url, config=channel.config)
    channel.cancel("early")
    channel.publish("sleep_for", "early", 1, {"seconds": 0.1, "ledger": str(ledger)})
    channel.publish("sleep_for", "long", 1, {"seconds": 30, "ledger": str(ledger)})
    wait_for(lambda: ledger_lines(ledger, "start"))
    channel.cancel("long")
    wait_for(lambda: set(states(channel, ["early", "long"]).values()) == {"failed"})
    assert channel.status("early")["error_code"] == channel.status("long")["error_code"] == "cancelled"
    assert [line[1] for line in ledger_lines(ledger)] == ["long", "long"]  # start, stopped
    assert ledger_lines(ledger, "stopped")
    channel.clear("long")
    assert channel.status("long") is None and not channel.cancel_requested("long")


# --- Engine-side views ----------------------------------------------------------------


def test_live_workers_and_queue_lengths(channel, workers, redis_url, media):
    worker = workers(types=["fail"], concurrency=2, url=redis_url, config=channel.config)
    [beat] = channel.live_workers()
    assert beat["worker_id"] == worker.worker_id and beat["types"] == ["fail"]
    assert beat["concurrency"] == 2 and beat["pid"] > 0
    assert channel.live_workers(types=["fail", "segment"]) == [beat]
    assert channel.live_workers(types=["segment"]) == []
    for n in range(3):
        channel.publish("noop", f"q{n}", 1, {})
    assert channel.queue_lengths() == {"noop": 3}
    assert channel.queue_lengths(["noop", "fail"]) == {"noop": 3, "fail": 0}


def test_a_beat_under_way_as_a_worker_stops_does_not_outlive_it(channel, workers, redis_url, media,
                                                                  tmp_path):
    """A stopped worker leaves no heartbeat behind, even when a beat was being written as it
    stopped: that beat would otherwise announce for a heartbeat's lifetime a worker that is
    gone, holding a job it handed back."""
    ledger = tmp_path / "ledger"
    worker = workers(types=["sleep_for"], url=redis_url, config=channel.config)
    channel.publish("sleep_for", "long", 1, {"seconds": 60, "ledger": str(ledger), "cooperative": False})
    wait_for(lambda: len(ledger_lines(ledger, "start")) == 1)

    slow_beats = []
    real_beat = worker.transport.beat

    def beat(*args, **kwargs):
        if worker.stopping:  # one under way through the shutdown's grace, and past its end
            slow_beats.append(time.monotonic())
            time.sleep(1.5)
        return real_beat(*args, **kwargs)

    worker.transport.beat = beat
    worker.request_stop()
    assert worker.exited.wait(15)
    assert slow_beats, "no beat was under way as the worker stopped"
    assert not channel.client.exists(channel.worker_key(worker.worker_id))
    assert channel.live_workers() == []
    assert channel.queue_lengths(["sleep_for"]) == {"sleep_for": 1}  # handed back


@pytest.mark.serial  # its CV worker's heartbeat thread must not outlive the test on a busy machine
def test_the_reaper_returns_only_dead_workers_jobs_to_the_head_of_the_queue(channel):
    for n in range(4):
        channel.publish("noop", f"r{n}", 1, {})
    # Two workers take two messages each; then the heartbeat of "dead" expires.
    channel.beat("dead", {"worker_id": "dead", "types": ["noop"]})
    channel.beat("alive", {"worker_id": "alive", "types": ["noop"]})
    taken = {}
    for worker_id in ["dead", "dead", "alive", "alive"]:
        _, raw = channel.take(["noop"], worker_id, wait_s=1)
        message = parse_message(raw, max_bytes=1000)
        assert channel.admit(message, f"{worker_id}:token") is Admission.RUN
        taken.setdefault(worker_id, []).append(message.job_id)
    assert taken == {"dead": ["r0", "r1"], "alive": ["r2", "r3"]}
    channel.client.delete(channel.worker_key("dead"))
    channel.publish("noop", "r4", 1, {})
    assert channel.reap_dead_workers() == 2
    assert channel.reap_dead_workers() == 0
    assert channel.client.smembers(channel.workers_key) == {"alive"}
    assert channel.client.llen(channel.processing_key("dead")) == 0
    assert channel.client.llen(channel.processing_key("alive")) == 2
    # Back at the head, oldest first, and claimable again by someone else.
    order = []
    for _ in range(3):
        _, raw = channel.take(["noop"], "next", wait_s=1)
        message = parse_message(raw, max_bytes=1000)
        order.append(message.job_id)
        assert channel.admit(message, "next:token") is Admission.RUN
    assert order == ["r0", "r1", "r4"]


def test_a_live_worker_returns_a_message_it_took_but_lost_the_reply_of(channel, workers, redis_url, media):
    worker = workers(types=["noop"], url=redis_url, config=channel.config)
    # As if a BLMOVE moved it and the connection broke before the reply came.
    channel.client.lpush(channel.processing_key(worker.worker_id), encode_message("noop", "lost", 1, {}))
    wait_for(lambda: states(channel, ["lost"])["lost"] == "done")
    assert channel.client.llen(channel.processing_key(worker.worker_id)) == 0


def test_is_pending_finds_queued_processing_and_reported_attempts(channel):
    channel.publish("noop", "a", 1, {})
    channel.publish("noop", "b", 1, {})
    assert channel.is_pending("a", 1) and channel.is_pending("b", 1)
    assert not channel.is_pending("a", 2) and not channel.is_pending("zzz", 1)
    # With the status keys gone (expired), the lists still tell.
    channel.client.delete(channel.status_key("a"), channel.status_key("b"))
    channel.beat("w1", {"worker_id": "w1", "types": ["noop"]})
    channel.take(["noop"], "w1", wait_s=1)  # "a" moves to w1's processing list
    assert channel.is_pending("a", 1) and channel.is_pending("b", 1)
    assert not channel.is_pending("a", 2)


# --- Redis itself ---------------------------------------------------------------------


def test_a_blocking_wait_longer_than_the_socket_timeout_does_not_raise(
        channel, workers, redis_url, media, monkeypatch, caplog):
    monkeypatch.setattr(clients, "SOCKET_TIMEOUT_S", 2.0)
    client = clients.build_client(redis_url)
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 2.0
    worker = workers(types=["noop"], url=redis_url, config=channel.config)
    # The CV worker's own client times out sooner: within its fence's margin (jobs/cv/worker.py).
    assert worker.client.connection_pool.connection_kwargs["socket_timeout"] <= 2.0
    transport = Transport(client, config=channel.config)
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="jobs"):
            # Waits 4 s on an empty queue (twice the socket timeout) while the
            # worker idles as long beside it.
            assert transport.take(["empty"], "direct", wait_s=4) is None
            assert time.monotonic() - started >= 4
            channel.publish("noop", "after-idle", 1, {})
            wait_for(lambda: states(channel, ["after-idle"])["after-idle"] == "done")
    finally:
        client.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_redis_restarted_empty_loses_published_jobs_and_republishing_completes_them(
        private_redis, workers, media):
    config = CVConfig(prefix="restart", **FAST)
    client = clients.build_client(private_redis.url)
    channel = Transport(client, config=config)
    job_ids = [f"j{n}" for n in range(50)]
    try:
        for job_id in job_ids:
            channel.publish("noop", job_id, 1, {"echo": job_id})
        assert all(channel.is_pending(job_id, 1) for job_id in job_ids)
        private_redis.restart()
        lost = [job_id for job_id in job_ids if not channel.is_pending(job_id, 1)]
        assert lost == job_ids
        for job_id in lost:
            channel.publish("noop", job_id, 1, {"echo": job_id})
        workers(types=["noop"], concurrency=4, url=private_redis.url, config=config)
        wait_for(lambda: set(states(channel, job_ids).values()) == {"done"}, timeout=20)
    finally:
        client.close()
    assert all(json.loads((media / f"cv/{j}/1.json").read_text()) == {"echo": j} for j in job_ids)


# --- Local mode (fakeredis) -------------------------------------------------------------


def test_embedded_worker_in_local_mode_runs_jobs_in_process(settings, media, workers):
    settings.REDIS_URL = ""
    clients._clients.clear()
    config = CVConfig(prefix=f"local{uuid.uuid4().hex[:6]}", **FAST)
    channel = Transport(clients.get_client(), config=config)
    worker = workers(types=["noop", "write_progress"], concurrency=2, config=config)
    assert clients.is_fake(worker.client)
    assert [beat["worker_id"] for beat in channel.live_workers()] == [worker.worker_id]
    # Idle, the worker blocks instead of spinning (fakeredis's BLMOVE would not block).
    cpu_before = time.process_time()
    time.sleep(1)
    assert time.process_time() - cpu_before < 0.5
    channel.publish("noop", "l1", 1, {"echo": 1})
    channel.publish("write_progress", "l2", 1, {"steps": 2})
    wait_for(lambda: set(states(channel, ["l1", "l2"]).values()) == {"done"})
    assert json.loads((media / "cv/l1/1.json").read_text()) == {"echo": 1}
    worker.request_stop()
    assert worker.exited.wait(10)
    assert channel.live_workers() == []
    clients._clients.clear()


def test_a_worker_refuses_types_without_a_handler(channel):
    with pytest.raises(Exception, match="No CV handler is registered for nosuch"):
        CVWorker(types=["nosuch"], config=channel.config)


def _first_used_at_once(threads):
    """Clients built one per thread, each sending its first command at the same moment."""
    start = threading.Barrier(threads)
    built = []

    def connect(n):
        client = clients.build_client("")
        start.wait()
        client.set(f"key{n}", n)
        built.append(client)

    runners = [threading.Thread(target=connect, args=(n,)) for n in range(threads)]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    return built


def test_local_mode_clients_first_used_at_once_on_many_threads_share_one_store(monkeypatch):
    # fakeredis makes a server's database on first use, unguarded: threads connecting at once
    # could each make their own, and a runworker's monitor and its embedded CV worker (which
    # start together) would then never see each other's jobs or heartbeats.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch every few bytecodes
    try:
        for _round in range(50):
            monkeypatch.setattr(clients, "_fake_server", None)  # a fresh server each round
            built = _first_used_at_once(8)
            assert [client.dbsize() for client in built] == [8] * 8
    finally:
        sys.setswitchinterval(interval)
