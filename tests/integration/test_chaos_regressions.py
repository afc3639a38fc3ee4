"""What the chaos runs found in the CV transport, each pinned against a real Redis.

- Redis restarted empty: a CV worker still running an attempt registers it
  again within one heartbeat, and the engine waits a heartbeat TTL before it
  sends an attempt Redis forgot (or ingests its result file, if written).
- Redis stalled past the heartbeat TTL: every heartbeat expired at once, and
  the reapers handed every running job to a second worker. A reaper that saw
  Redis fail or stall now trusts no missing heartbeat for a TTL.
- A download failed for good by the rescue of its dead worker left its asset
  `downloading` and its partial in staging: the rescue now runs the kind's
  cleanup.
"""

import threading
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from jobs import services
from jobs.cv import clients
from jobs.cv.monitor import Monitor
from jobs.cv.transport import (
    Admission,
    CVConfig,
    Transport,
    encode_message,
    parse_message,
    result_path,
)
from jobs.cv.worker import CVWorker
from jobs.engine import claiming
from jobs.maintenance import reaper
from jobs.models import Job, JobStatus
from jobs.models import Worker as WorkerRow
from tests import cv_handlers  # noqa: F401 - registers the CV test handlers
from tests.acceptance.conftest import wait_for
from tests.servers import need

pytestmark = pytest.mark.redis


@pytest.fixture
def prefix(redis_url):
    """A key prefix of this test's own on the shared Redis, emptied afterwards."""
    name = f"chaos-regress-{uuid.uuid4().hex[:8]}"
    yield name
    client = clients.build_client(redis_url)
    keys = list(client.scan_iter(f"{name}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def forget_everything(client, prefix):
    """What a Redis restart without persistence does to these keys."""
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)


# --- The reaper and a stalled Redis ---------------------------------------------------------


@pytest.fixture
def stalling_redis(tmp_path):
    """A private Redis (a test may pause it; the session's is shared)."""
    from tests.chaos.redis_server import RedisServer, binary

    need("redis-server", binary())
    server = RedisServer(binary(), folder=tmp_path).start()
    yield server
    server.close()


def held_by_a_silent_worker(transport, worker_id, job_id):
    raw = encode_message("noop", job_id, 1, {})
    transport.client.sadd(transport.workers_key, worker_id)
    transport.client.lpush(transport.processing_key(worker_id), raw)
    transport.beat(worker_id, {"types": ["noop"]})  # expires after the TTL unless renewed
    return raw


@pytest.mark.dbless
def test_heartbeats_that_expired_during_a_stall_do_not_count_as_deaths(stalling_redis):
    config = CVConfig(prefix="p", heartbeat_ttl_s=1, heartbeat_interval_s=0.2)
    transport = Transport(clients.build_client(stalling_redis.url), config=config)
    raw = held_by_a_silent_worker(transport, "w1", "7")

    stalling_redis.pause(1500)  # longer than the TTL: the heartbeat is gone afterwards
    assert transport.reap_dead_workers() == 0  # this call waited out the stall
    assert transport.client.get(transport.worker_key("w1")) is None
    assert transport.reap_dead_workers() == 0  # live workers get a TTL to beat again
    assert transport.held_by("w1") == [raw]

    # The reaper keeps looking at its own pace; w1 stays silent a whole TTL: it is dead.
    assert reap_at_intervals(transport, config.heartbeat_ttl_s) == 0
    assert transport.reap_dead_workers() == 1
    assert transport.queue_lengths(["noop"]) == {"noop": 1}


def reap_at_intervals(transport, seconds, between=None):
    """Reap every heartbeat interval for `seconds` (calling `between` first each time), as
    the engine's monitor and every CV worker do; returns how many messages were returned."""
    returned = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if between is not None:
            between()
        returned += transport.reap_dead_workers()
        time.sleep(transport.config.heartbeat_interval_s)
    return returned


@pytest.mark.dbless
def test_a_worker_that_beats_again_after_a_stall_keeps_its_jobs(stalling_redis):
    config = CVConfig(prefix="p", heartbeat_ttl_s=1, heartbeat_interval_s=0.2)
    transport = Transport(clients.build_client(stalling_redis.url), config=config)
    worker = Transport(clients.build_client(stalling_redis.url), config=config)
    raw = held_by_a_silent_worker(worker, "w2", "8")
    stalling_redis.pause(1500)
    assert transport.reap_dead_workers() == 0
    # ... and it beats again once Redis answers, as it does every interval.
    assert reap_at_intervals(transport, 2 * config.heartbeat_ttl_s,
                             between=lambda: worker.beat("w2", {"types": ["noop"]})) == 0
    assert transport.held_by("w2") == [raw]


@pytest.mark.dbless
def test_a_stall_between_two_calls_of_a_reaper_still_counts_as_a_stall(stalling_redis):
    """A reaper whose calls all fell outside the stall heard nothing wrong, but it heard
    nothing at all for longer than a live heartbeat survives: it must doubt the missing
    ones. (A CV worker's heartbeat thread spent a stall in progress writes, which are not
    watched, then beat at once: it returned a live worker's running jobs to the queue.)"""
    config = CVConfig(prefix="p", heartbeat_ttl_s=1, heartbeat_interval_s=0.2)
    transport = Transport(clients.build_client(stalling_redis.url), config=config)
    worker = Transport(clients.build_client(stalling_redis.url), config=config)
    raw = held_by_a_silent_worker(worker, "w4", "10")
    assert transport.reap_dead_workers() == 0  # heard from Redis: w4 beat just now

    stalling_redis.pause(1500)  # longer than the TTL; this reaper calls only once it is over
    time.sleep(1.7)
    assert worker.client.get(worker.worker_key("w4")) is None
    assert transport.reap_dead_workers() == 0
    assert transport.held_by("w4") == [raw]
    # w4 lives: it beats again within an interval, and keeps its job from then on.
    assert reap_at_intervals(transport, 2 * config.heartbeat_ttl_s,
                             between=lambda: worker.beat("w4", {"types": ["noop"]})) == 0
    assert transport.held_by("w4") == [raw]


@pytest.mark.dbless
def test_without_a_stall_a_missing_heartbeat_is_a_death_at_once(redis_url, prefix):
    config = CVConfig(prefix=prefix, heartbeat_ttl_s=1, heartbeat_interval_s=0.2)
    transport = Transport(clients.build_client(redis_url), config=config)
    held_by_a_silent_worker(transport, "w3", "9")
    transport.client.delete(transport.worker_key("w3"))
    assert transport.reap_dead_workers() == 1


# --- A CV worker and a Redis that forgot everything ----------------------------------------


@pytest.mark.dbless
def test_a_cv_worker_registers_its_running_attempt_again_after_redis_lost_everything(
        redis_url, prefix, media_root, tmp_path):
    config = CVConfig(prefix=prefix, heartbeat_ttl_s=1, heartbeat_interval_s=0.2, shutdown_grace_s=1)
    worker = CVWorker(types=["sleep_for"], concurrency=2, worker_id="regress-1", url=redis_url,
                      config=config)
    threading.Thread(target=worker.run, daemon=True).start()
    transport = Transport(clients.build_client(redis_url), config=config)
    ledger = tmp_path / "ledger"
    try:
        assert worker.ready.wait(10)
        transport.publish("sleep_for", "41", 1, {"seconds": 3, "ledger": str(ledger)})
        wait_for(lambda: (transport.status("41") or {}).get("state") == "running", timeout=10)
        forget_everything(transport.client, prefix)

        # Within a heartbeat the attempt is known again: status, claim and processing list.
        wait_for(lambda: (transport.status("41") or {}).get("state") == "running", timeout=5)
        assert transport.client.get(transport.seen_key("41", 1)).startswith("regress-1:")
        assert [parse_message(raw, max_bytes=10**6).job_id
                for raw in transport.held_by("regress-1")] == ["41"]
        # So a copy sent again meanwhile is dropped, not run alongside.
        duplicate = parse_message(encode_message("sleep_for", "41", 1, {}), max_bytes=10**6)
        assert transport.admit(duplicate, "regress-2:x") is Admission.DUPLICATE
        wait_for(lambda: (transport.status("41") or {}).get("state") == "done", timeout=10)
    finally:
        worker.request_stop()
        worker.exited.wait(10)
    assert [line.split()[0] for line in ledger.read_text().splitlines()] == ["start", "finish"]


# --- The engine's monitor and an attempt Redis forgot -------------------------------------


@pytest.fixture
def monitor(transactional_db, settings, redis_url, prefix, media_root):
    settings.REDIS_URL = redis_url
    settings.CV_REDIS_PREFIX = prefix
    settings.CV_HEARTBEAT_TTL_S = 1
    settings.CV_HEARTBEAT_INTERVAL_S = 0.2
    clients._clients.clear()
    row = WorkerRow.objects.create(name="regress", host="h", pid=1, queues=["cv"],
                                   kinds=["tests.cv_noop"], concurrency=1)
    watcher = Monitor(SimpleNamespace(row=row, exited=threading.Event(), wake=threading.Event(),
                                      reset_connection=lambda: None))
    yield watcher
    clients._clients.clear()


def claimed_cv_job(monitor):
    services.enqueue("tests.cv_noop", {"echo": 1})
    [job] = claiming.claim(monitor.worker.row, queues=["cv"], kinds=["tests.cv_noop"], limit=1)
    monitor.adopt([job])
    return job


def test_an_attempt_redis_forgot_is_sent_again_only_after_a_heartbeat_ttl(monitor, prefix):
    job = claimed_cv_job(monitor)
    transport = monitor.transport
    forget_everything(transport.client, prefix)

    monitor.tick()  # a CV worker still running it would register it again within a beat
    assert transport.queue_lengths(["noop"]) == {"noop": 0}
    monitor.missing[job.pk] -= transport.config.heartbeat_ttl_s
    monitor.tick()
    assert transport.queue_lengths(["noop"]) == {"noop": 1}
    assert transport.status(str(job.pk))["attempt"] == job.attempts


def test_a_result_file_older_than_the_attempt_is_never_ingested_for_it(monitor, prefix, media_root):
    # Left by a job of the same id in a database that was reset (MEDIA_ROOT kept).
    from jobs.cv import files

    services.enqueue("tests.cv_noop", {"echo": 1})
    [job] = claiming.claim(monitor.worker.row, queues=["cv"], kinds=["tests.cv_noop"], limit=1)
    stale = media_root / result_path(str(job.pk), job.attempts)
    files.write_json_atomic(stale, {"echo": "from another database"})
    monitor.adopt([job])
    assert not stale.exists()  # a publish starts the attempt afresh
    forget_everything(monitor.transport.client, prefix)
    monitor.tick()
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING  # waits for the fleet instead of ingesting it


def test_an_attempt_whose_status_redis_lost_after_its_result_was_written_is_ingested(
        monitor, prefix, media_root):
    from jobs.cv import files

    job = claimed_cv_job(monitor)
    relative = result_path(str(job.pk), job.attempts)
    files.write_json_atomic(media_root / relative, {"echo": 1})
    forget_everything(monitor.transport.client, prefix)

    monitor.tick()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.SUCCESSFUL, {"result": relative})
    assert monitor.transport.queue_lengths(["noop"]) == {"noop": 0}  # not run a second time
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


# --- A download whose worker died during its last attempt ----------------------------------


def test_a_download_failed_by_its_last_rescue_leaves_no_asset_downloading_and_no_partial(
        transactional_db, settings, user, media_root):
    from downloads import services as downloads
    from downloads import storage
    from downloads.models import MediaAsset

    settings.DOWNLOADS_EGRESS_ALLOW = "127.0.0.1:9"
    download = downloads.download_submit(owner=user, url="http://127.0.0.1:9/clip.mp4")
    Job.objects.filter(pk=download.job_id).update(attempts=2)  # two attempts already spent
    row = WorkerRow.objects.create(name="doomed", host="h", pid=1, queues=["downloads"],
                                   kinds=["downloads.fetch"], concurrency=1)
    [job] = claiming.claim(row, queues=["downloads"], kinds=["downloads.fetch"], limit=1)
    # The child took the asset and wrote part of the file; then the worker was killed.
    assert downloads.asset_claim(download.asset_id, job.lease_token)
    staging = storage.staging_dir(download.asset_id)
    staging.mkdir(parents=True)
    (staging / "media.mp4.part").write_bytes(b"\0" * 1024)
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    assert reaper.rescue_expired() == [job.pk]
    job.refresh_from_db()
    assert (job.status, job.error_code) == (JobStatus.FAILED, "lease_expired")
    assert MediaAsset.objects.get(pk=download.asset_id).state != MediaAsset.State.DOWNLOADING
    assert not any(staging.glob("*"))


# --- CV jobs claimed together while Redis stalls -------------------------------------------


def test_cv_jobs_claimed_together_are_all_watched_before_the_first_is_sent(
        transactional_db, settings, stalling_redis, prefix, media_root):
    settings.REDIS_URL = stalling_redis.url
    settings.CV_REDIS_PREFIX = prefix
    clients._clients.clear()
    row = WorkerRow.objects.create(name="batch", host="h", pid=1, queues=["cv"],
                                   kinds=["tests.cv_noop"], concurrency=3)
    watcher = Monitor(SimpleNamespace(row=row, exited=threading.Event(), wake=threading.Event(),
                                      reset_connection=lambda: None))
    for i in range(3):
        services.enqueue("tests.cv_noop", {"echo": i})
    jobs = claiming.claim(row, queues=["cv"], kinds=["tests.cv_noop"], limit=3)
    assert len(jobs) == 3
    try:
        stalling_redis.pause(1500)
        sending = threading.Thread(target=watcher.adopt, args=(jobs,), daemon=True)
        sending.start()
        time.sleep(0.5)  # the first publish is waiting on the stalled Redis
        assert sending.is_alive()
        with watcher.lock:
            # Every one is watched, so its lease is renewed while it waits its turn.
            assert set(watcher.inflight) == {job.pk for job in jobs}
        sending.join(20)
        assert watcher.transport.queue_lengths(["noop"]) == {"noop": 3}
    finally:
        clients._clients.clear()


def test_a_watched_job_not_sent_yet_is_never_sent_by_the_lost_attempt_path(monitor):
    services.enqueue("tests.cv_noop", {"echo": 1})
    [job] = claiming.claim(monitor.worker.row, queues=["cv"], kinds=["tests.cv_noop"], limit=1)
    with monitor.lock:  # as adopt() leaves a job while an earlier one's publish waits
        monitor.inflight[job.pk] = job
        monitor.unsent.add(job.pk)
    monitor.tick()
    monitor.missing[job.pk] = time.monotonic() - 60  # unknown to Redis for long enough
    monitor.tick()
    assert monitor.transport.queue_lengths(["noop"]) == {"noop": 0}
    with monitor.lock:
        monitor.unsent.discard(job.pk)
    monitor.send(job)
    assert monitor.transport.queue_lengths(["noop"]) == {"noop": 1}  # sent exactly once
