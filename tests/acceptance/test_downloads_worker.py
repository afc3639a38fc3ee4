"""Downloads end to end: real runworker processes, real yt-dlp children, a real HTTP origin."""

import os
import threading
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from downloads import progress, services, storage
from downloads.models import Download, DownloadQuota, MediaAsset
from jobs.engine import dependencies
from jobs.models import Job, JobStatus
from jobs.runtime.process.child import has_marker
from tests import media
from tests.acceptance.conftest import wait_for

pytestmark = pytest.mark.slow
KB, MB = 1024, 1024 * 1024


@pytest.fixture
def worker(spawn_worker, media_root, origin, settings):
    allowed = f"127.0.0.1:{origin.port}"
    settings.DOWNLOADS_EGRESS_ALLOW = allowed  # for submissions made in this process

    def start(**env):
        return spawn_worker("--concurrency", "4", "--queues", "downloads", env={
            "MEDIA_ROOT": str(media_root), "DOWNLOADS_EGRESS_ALLOW": allowed,
            "DOWNLOADS_SOCKET_TIMEOUT_S": "20", **env})

    return start


def fresh(download):
    # Outside a transaction every query sees the workers' latest commits.
    return Download.objects.select_related("job", "asset").get(pk=download.pk)


def status_of(download):
    return fresh(download).current_status


def wait_status(download, *statuses, timeout=60):
    wait_for(lambda: status_of(download) in statuses, timeout=timeout, interval=0.1)
    return fresh(download)


def finished(downloads):
    """Whether every one of `downloads` has finished (one query, not one per download)."""
    rows = Download.objects.filter(pk__in=[d.pk for d in downloads]).select_related("job")
    return all(not row.is_live for row in rows)


def bytes_done(download):
    row = fresh(download)
    return (progress.decode(row.job.progress_message).bytes_done or 0) if row.job else 0


def processes_of(job):
    """Live processes started for this attempt of the job (its child and what that started)."""
    marker = f"job-{job.pk}-{job.lease_token}"
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and has_marker(int(p), marker)]


def make_user(name, **quota):
    user = get_user_model().objects.create_user(name)  # no password: hashing 20 costs seconds
    if quota:
        DownloadQuota.objects.create(user=user, **quota)
    return user


# --- Plain downloads -------------------------------------------------------------

def test_a_direct_mp4_arrives_byte_for_byte_and_is_served_with_ranges(worker, origin, user,
                                                                      media_root):
    source = media.short_mp4()
    download = services.download_submit(owner=user, url=origin.add_file("/v/clip.mp4", source))
    worker()
    done = wait_status(download, "successful", "failed")
    assert done.current_status == "successful", done.job.error
    assert done.job.result["from_cache"] is False
    asset = done.asset
    assert asset.state == MediaAsset.State.READY
    assert asset.file == f"assets/{asset.pk}/media.mp4"
    assert storage.absolute(asset.file).read_bytes() == source.read_bytes()
    assert asset.size_bytes == source.stat().st_size
    assert asset.duration_s == pytest.approx(2.0, abs=0.1)
    assert not storage.staging_dir(asset.pk).exists()
    assert done.status == "successful"  # the copy a pruned job leaves behind
    segment = Job.objects.get(kind="downloads.segment")  # every finished video is split into shots
    assert segment.payload == {"asset": asset.pk, "file": asset.file}
    assert asset.segment_job_id == segment.pk
    # A workflow: the split waits for the fetch that made the file (decided in its
    # commit), and the insights prefetch waits for the split.
    assert list(dependencies.parents_of(segment)) == [done.job]
    wait_for(lambda: Job.objects.get(pk=segment.pk).blocked_key is None, timeout=10)
    [prefetch] = dependencies.dependents_of(segment)
    assert (prefetch.kind, prefetch.blocked_key) == ("insights.prefetch", "@parents")

    client = Client()
    client.force_login(user)
    whole = client.get(f"/downloads/{download.pk}/file/")
    assert whole.status_code == 200
    assert b"".join(whole.streaming_content) == source.read_bytes()
    part = client.get(f"/downloads/{download.pk}/file/", HTTP_RANGE="bytes=100-199")
    assert part.status_code == 206
    assert part["Content-Range"] == f"bytes 100-199/{source.stat().st_size}"
    assert b"".join(part.streaming_content) == source.read_bytes()[100:200]


def test_an_hls_rendition_is_fetched_segment_by_segment(worker, origin, user):
    folder = media.hls_rendition()
    url = origin.add_folder("/hls", folder) + "index.m3u8"
    download = services.download_submit(owner=user, url=url)
    worker()
    done = wait_status(download, "successful", "failed")
    assert done.current_status == "successful", done.job.error
    for segment in folder.glob("*.ts"):
        assert origin.requests_for(f"/hls/{segment.name}")
    path = storage.absolute(done.asset.file)
    assert path.read_bytes()[4:8] == b"ftyp"  # remuxed into MP4
    assert done.asset.duration_s == pytest.approx(3.0, abs=0.2)


def test_twenty_users_asking_for_one_url_share_one_transfer(worker, origin, transactional_db):
    source = media.padded_mp4(1 * MB, seed=20)
    url = origin.add_file("/shared.mp4", source, throttle_bytes_s=2 * MB)
    users = [make_user(f"user{i}") for i in range(20)]
    downloads, errors = [], []

    def submit(owner):
        try:
            downloads.append(services.download_submit(owner=owner, url=url))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(u,)) for u in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    worker()
    wait_for(lambda: finished(downloads), timeout=60, interval=0.25)
    assert [status_of(d) for d in downloads] == ["successful"] * 20
    assert MediaAsset.objects.count() == 1
    # One fetch opens the URL twice: yt-dlp reads the headers of the first
    # response (never its body) to recognise a direct link, then fetches it.
    gets = [seen for seen in origin.requests_for("/shared.mp4") if seen.method == "GET"]
    assert len(gets) == 2
    results = [fresh(d).job.result for d in downloads]
    assert sum(1 for r in results if not r["from_cache"]) == 1
    asset = MediaAsset.objects.get()
    assert storage.absolute(asset.file).read_bytes() == source.read_bytes()


# --- Stopping ----------------------------------------------------------------------

def test_cancel_mid_download_kills_the_child_and_deletes_the_partial(worker, origin, user):
    url = origin.add_file("/big.mp4", media.padded_mp4(4 * MB, seed=5), throttle_bytes_s=512 * KB)
    download = services.download_submit(owner=user, url=url)
    worker()
    wait_for(lambda: bytes_done(download) >= 256 * KB, interval=0.1)
    running = fresh(download)
    job = running.job
    assert processes_of(job)
    asset_id = running.asset_id
    assert storage.staging_dir(asset_id).exists()
    services.download_cancel(running)
    done = wait_status(download, "cancelled")
    assert done.job.error_code == "cancelled"
    wait_for(lambda: not processes_of(job), timeout=10, interval=0.2)
    wait_for(lambda: not storage.staging_dir(asset_id).exists(), timeout=10)
    # The partial goes inside the transaction that lets go of the asset, a moment before it commits.
    wait_for(lambda: MediaAsset.objects.get(pk=asset_id).state == MediaAsset.State.PENDING, timeout=10)
    assert done.status == "cancelled"


def test_pause_keeps_the_partial_and_resume_continues_from_it(worker, origin, user):
    source = media.padded_mp4(3 * MB, seed=6)
    url = origin.add_file("/big.mp4", source, throttle_bytes_s=512 * KB)
    download = services.download_submit(owner=user, url=url)
    worker()
    wait_for(lambda: bytes_done(download) >= 300 * KB, timeout=60, interval=0.1)
    services.download_pause(fresh(download))
    paused = wait_status(download, "paused")
    partial = storage.staging_dir(paused.asset_id) / "media.mp4.part"
    kept = partial.stat().st_size
    assert 0 < kept < len(source.read_bytes())
    origin.resources["/big.mp4"].throttle_bytes_s = None
    services.download_resume(paused)
    done = wait_status(download, "successful", "failed")
    assert done.current_status == "successful", done.job.error
    resumed = [seen.range_start for seen in origin.requests_for("/big.mp4")
               if seen.method == "GET" and seen.range_start]
    assert resumed and resumed[0] >= kept > 0
    assert storage.absolute(done.asset.file).read_bytes() == source.read_bytes()
    assert done.job.attempts == 1  # a pause spends no attempt


def test_a_drip_fed_origin_is_stopped_as_stalled(worker, origin, user):
    url = origin.add_file("/drip.mp4", media.padded_mp4(1 * MB, seed=7), drip_bytes=64 * KB)
    download = services.download_submit(owner=user, url=url)
    # A short stall timeout; a long backoff keeps the retry out of the way.
    worker(DOWNLOADS_STALL_TIMEOUT_S="2", JOBS_BACKOFF_BASE_SECONDS="600")
    assert origin.stalled.wait(60)
    wait_for(lambda: fresh(download).job.error_code == "stalled", timeout=30, interval=0.1)
    # The worker releases the asset once the killed child is gone.
    wait_for(lambda: fresh(download).asset.state == MediaAsset.State.PENDING, timeout=10)
    row = fresh(download)
    assert row.job.status == JobStatus.READY  # a retry is scheduled: stalls are not permanent
    assert row.job.run_after > row.job.updated_at
    assert not storage.staging_dir(row.asset_id).exists()  # a retry starts clean
    origin.release()


# --- Quotas --------------------------------------------------------------------------

@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "no-length"])
def test_a_file_over_the_storage_quota_fails_and_leaves_nothing(worker, origin, announced):
    owner = make_user("small", storage_bytes=300 * KB)
    url = origin.add_file("/big.mp4", media.padded_mp4(2 * MB, seed=8), content_length=announced)
    download = services.download_submit(owner=owner, url=url)
    worker()
    done = wait_status(download, "failed", "successful")
    assert done.current_status == "failed"
    assert done.job.error_code == "quota"
    assert done.job.attempts == 1  # a quota failure is not retried
    assert not storage.staging_dir(done.asset_id).exists()
    assert not storage.asset_dir(done.asset_id).exists()
    assert done.asset.state == MediaAsset.State.PENDING
    if announced:  # refused before a single byte of the file was fetched
        assert not any(seen.method == "GET" and seen.range_start is None
                       for seen in origin.requests_for("/big.mp4")[1:])


# --- Hostile destinations ----------------------------------------------------------------

def test_a_redirect_to_a_server_not_allowed_is_blocked(worker, origin, elsewhere, user):
    url = origin.add_redirect("/go", elsewhere.url("/clip.mp4"))
    download = services.download_submit(owner=user, url=url)
    worker()
    done = wait_status(download, "failed", "successful")
    assert done.job.error_code == "blocked_destination"
    assert elsewhere.saw_nothing()


def test_an_hls_segment_on_a_server_not_allowed_is_blocked(worker, origin, elsewhere, user):
    folder = media.hls_rendition()
    lines = []
    for line in (folder / "index.m3u8").read_text().splitlines():
        lines.append(elsewhere.url(f"/hls/{line}") if line.endswith(".ts") else line)
    url = origin.add_file("/evil/index.m3u8", "\n".join(lines).encode() + b"\n")
    download = services.download_submit(owner=user, url=url)
    worker()
    done = wait_status(download, "failed", "successful")
    assert done.job.error_code == "blocked_destination"
    assert elsewhere.saw_nothing()
    assert not Path(storage.staging_dir(done.asset_id)).exists()
