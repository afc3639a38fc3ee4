"""Storage housekeeping: unreferenced files collected, the least recently used evicted down to
MEDIA_MAX_BYTES, and never a file that a live job or a player is using."""

import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from downloads import housekeeping, scheduled, services, shots, storage
from downloads.edits import Edit
from downloads.models import Download, DownloadQuota, MediaAsset, Shot
from jobs import services as jobs
from jobs.models import ConcurrencyLimit, Job, JobStatus

pytestmark = pytest.mark.usefixtures("media_root")

ROOT = Path(__file__).resolve().parents[2]
URL = "https://videos.example.com/clip-{}.mp4"
SIZE = 1000
BIG = 1024 * 1024  # more than one chunk of a streamed response


def finished(owner, n, *, size=SIZE, used_h_ago=None, ready_h_ago=10):
    """A finished download of a ready asset whose file is `size` real bytes under MEDIA_ROOT."""
    download = services.download_submit(owner=owner, url=URL.format(n))
    asset = download.asset
    folder = storage.asset_dir(asset.pk)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "media.mp4").write_bytes(bytes(i % 251 for i in range(size)))
    now = timezone.now()
    MediaAsset.objects.filter(pk=asset.pk).update(
        state="ready", file=f"assets/{asset.pk}/media.mp4", size_bytes=size, title=f"Clip {n}",
        ready_at=now - timedelta(hours=ready_h_ago),
        last_accessed_at=None if used_h_ago is None else now - timedelta(hours=used_h_ago))
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL, progress=1.0,
                                                  finished_at=now)
    Download.objects.filter(pk=download.pk).update(status="successful", finished_at=now)
    return Download.objects.select_related("asset").get(pk=download.pk)


def on_disk(download):
    return storage.asset_dir(download.asset_id).joinpath("media.mp4").exists()


def state(download):
    return MediaAsset.objects.get(pk=download.asset_id).state


def status(download):
    return Download.objects.get(pk=download.pk).current_status


# --- Collecting unreferenced assets -------------------------------------------------

def test_unreferenced_assets_are_collected_and_referenced_ones_kept(user, other_user):
    kept = finished(user, 1)
    orphan = finished(other_user, 2)
    Download.objects.filter(pk=orphan.pk).delete()  # a row gone without its cleanup

    report = housekeeping.run()

    assert on_disk(kept) and state(kept) == "ready"
    assert not on_disk(orphan) and state(orphan) == "pending"
    assert (report.collected, report.collected_bytes, report.evicted) == (1, SIZE, 0)
    assert ConcurrencyLimit.objects.get(key=f"asset:{orphan.asset_id}").limit == 1


def test_a_parent_stays_while_an_edit_of_it_waits_and_goes_once_the_edit_is_made(user):
    source = finished(user, 1)
    edit = services.edit_submit(owner=user, source=source, edit=Edit("audio"))
    Download.objects.filter(pk=source.pk).delete()  # only the edit refers to the parent now

    report = housekeeping.run()
    assert on_disk(source), "the queued edit still needs the file it is made from"
    assert report.skipped == {"edit_waiting": 1}

    # The edit is made (its own file): nothing needs the parent any more.
    folder = storage.asset_dir(edit.asset_id)
    folder.mkdir(parents=True)
    (folder / "media.m4a").write_bytes(b"a" * 10)
    MediaAsset.objects.filter(pk=edit.asset_id).update(
        state="ready", file=f"assets/{edit.asset_id}/media.m4a", size_bytes=10)
    Job.objects.filter(pk=edit.job_id).update(status=JobStatus.SUCCESSFUL)
    report = housekeeping.run()
    assert not on_disk(source) and (folder / "media.m4a").exists()
    assert report.collected == 1


# --- Evicting down to the cap -------------------------------------------------------

def test_with_a_cap_the_least_recently_used_are_evicted_until_under_it(user, settings):
    oldest = finished(user, 1, used_h_ago=5)
    never_played = finished(user, 2, used_h_ago=None, ready_h_ago=4)  # falls back to ready_at
    older = finished(user, 3, used_h_ago=3)
    newest = finished(user, 4, used_h_ago=1)
    Shot.objects.create(asset_id=oldest.asset_id, index=0, start_s=0, end_s=1)
    settings.MEDIA_MAX_BYTES = 2 * SIZE + 500  # room for two and a half

    report = housekeeping.run()

    assert [on_disk(d) for d in (oldest, never_played, older, newest)] == [False, False, True, True]
    assert (report.evicted, report.evicted_bytes, report.ready_bytes) == (2, 2 * SIZE, 2 * SIZE)
    assert not report.over_cap
    assert [status(d) for d in (oldest, never_played, newest)] == ["evicted", "evicted",
                                                                   "successful"]
    evicted = MediaAsset.objects.get(pk=oldest.asset_id)
    assert (evicted.state, evicted.file, evicted.ready_at) == ("pending", "", None)
    assert not Shot.objects.filter(asset_id=oldest.asset_id).exists()
    assert ConcurrencyLimit.objects.get(key=f"asset:{oldest.asset_id}").limit == 1
    assert housekeeping.run().evicted == 0  # under the cap: nothing more


def test_the_cap_reads_suffixes_from_the_environment(user, settings, monkeypatch):
    del settings.MEDIA_MAX_BYTES
    monkeypatch.setenv("MEDIA_MAX_BYTES", "1K")
    first, second = finished(user, 1, used_h_ago=2), finished(user, 2, used_h_ago=1)
    housekeeping.run()
    assert not on_disk(first) and on_disk(second)


def test_without_a_cap_nothing_is_evicted(user, settings):
    settings.MEDIA_MAX_BYTES = 0
    download = finished(user, 1, used_h_ago=1000)
    assert housekeeping.run().evicted == 0 and on_disk(download)


# --- Never a file in use --------------------------------------------------------------

def _stream(client, download, headers):
    """A player's request for the file, read part-way in another thread until `done` is set."""
    response = client.get(f"/downloads/{download.pk}/file/", headers=headers)
    assert response.status_code in (200, 206) and response.streaming
    started, done = threading.Event(), threading.Event()

    def play():
        chunks = iter(response.streaming_content)
        next(chunks)
        started.set()
        done.wait(30)
        response.close()  # the player went away: the server closes the response

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    assert started.wait(10)
    return done, thread


@pytest.mark.parametrize("headers", [{}, {"Range": "bytes=1000-"}], ids=["whole", "range"])
def test_a_file_being_streamed_is_kept_until_the_stream_closes(alice_client, user, settings,
                                                               headers):
    playing = finished(user, 1, size=BIG, used_h_ago=9)
    idle = finished(user, 2, used_h_ago=8)
    settings.MEDIA_MAX_BYTES = 1  # everything would go
    done, thread = _stream(alice_client, playing, headers)

    report = housekeeping.run()
    assert on_disk(playing) and status(playing) == "successful"
    assert not on_disk(idle)
    assert report.skipped == {"streaming": 1} and report.over_cap

    done.set()
    thread.join(10)
    report = housekeeping.run()
    assert not on_disk(playing) and status(playing) == "evicted"
    assert report.evicted == 1 and not report.skipped


def test_a_file_read_by_another_process_is_kept(user, settings):
    download = finished(user, 1, used_h_ago=9)
    settings.MEDIA_MAX_BYTES = 1
    path = storage.absolute(MediaAsset.objects.get(pk=download.asset_id).file)
    # A server process on the same machine holding the file for a player.
    with subprocess.Popen(
            [sys.executable, "-c", "import sys; from downloads import serving; "
             f"f = serving.open_shared({str(path)!r}); print('open', flush=True); sys.stdin.read()"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as reader:
        assert reader.stdout.readline().strip() == "open"
        assert housekeeping.run().skipped == {"streaming": 1}
        assert on_disk(download)
        reader.stdin.close()  # the process ends, and with it its lock
    assert housekeeping.run().evicted == 1 and not on_disk(download)


def _live_fetch(user, other_user, download):
    # Another user's download of the same asset, queued before it was ready, now running.
    theirs = Download.objects.create(owner=other_user, asset_id=download.asset_id, status="ready")
    job = jobs.enqueue(services.FETCH_KIND, {"download": str(theirs.pk),
                                            "asset": download.asset_id}, owner=other_user)
    Download.objects.filter(pk=theirs.pk).update(job=job)
    return job


def _live_edit(user, other_user, download):
    edit = services.edit_submit(owner=user, source=download, edit=Edit("audio"))
    return edit.job


def _live_segment(user, other_user, download):
    return shots.asset_segment(MediaAsset.objects.get(pk=download.asset_id), owner=user)


def _live_analyze(user, other_user, download):
    shot = Shot.objects.create(asset_id=download.asset_id, index=0, start_s=0, end_s=1)
    return shots.shot_analyze(Shot.objects.select_related("asset").get(pk=shot.pk), owner=user)


@pytest.mark.parametrize("start", [_live_fetch, _live_edit, _live_segment, _live_analyze],
                         ids=["fetch", "edit_of_it", "segment", "analyze"])
def test_an_asset_a_running_job_uses_is_not_evicted(user, other_user, settings, start):
    download = finished(user, 1, used_h_ago=9)
    settings.MEDIA_MAX_BYTES = 1
    job = start(user, other_user, download)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)

    report = housekeeping.run()
    assert on_disk(download) and state(download) == "ready" and status(download) == "successful"
    assert set(report.skipped) <= {"live_job", "live_cv_job"} and report.skipped

    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    if start is _live_edit:  # its failed download could be retried: keep the parent for it
        Download.objects.filter(job_id=job.pk).delete()
    assert housekeeping.run().evicted == 1 and not on_disk(download)


def test_an_asset_used_since_it_was_chosen_is_kept(user):
    download = finished(user, 1, used_h_ago=9)
    seen = timezone.now() - timedelta(hours=9, seconds=1)
    assert services.asset_evict(download.asset_id, used_at=seen) == "used"
    assert on_disk(download)


def test_an_edit_asked_for_as_its_file_is_evicted_is_refused(user):
    download = finished(user, 1)
    download.job  # noqa: B018 - read before the eviction: the page the user clicked on
    assert services.asset_evict(download.asset_id) == "evicted"
    with pytest.raises(services.IllegalTransition, match="no longer available"):
        services.edit_submit(owner=user, source=download, edit=Edit("audio"))
    assert not MediaAsset.objects.filter(parent_id=download.asset_id).exists()


# --- What users see, and downloading again ---------------------------------------------

@pytest.fixture
def evicted(user):
    download = finished(user, 1)
    assert services.asset_evict(download.asset_id) == "evicted"
    return Download.objects.get(pk=download.pk)


def test_evicted_downloads_say_so_on_the_pages_and_in_the_api(alice_client, evicted):
    listing = alice_client.get("/downloads/").content.decode()
    assert 'data-status="evicted"' in listing and "Evicted" in listing
    assert "Download again" in listing and f"/downloads/{evicted.pk}/retry/" in listing
    detail = alice_client.get(f"/downloads/{evicted.pk}/").content.decode()
    assert "Download again" in detail and "<video" not in detail
    assert alice_client.get(f"/downloads/{evicted.pk}/file/").status_code == 404
    api = alice_client.get(f"/api/downloads/{evicted.pk}/").json()
    assert api["status"] == "evicted" and api["actions"] == ["retry", "delete"]
    assert api["asset"]["file_url"] is None


def test_download_again_queues_a_fetch_through_the_normal_path(alice_client, user, evicted):
    response = alice_client.post(f"/downloads/{evicted.pk}/retry/")
    assert response.status_code == 302
    download = Download.objects.select_related("job").get(pk=evicted.pk)
    assert download.current_status == "ready"
    assert download.job.kind == "downloads.fetch" and download.job.payload["asset"] == \
        evicted.asset_id
    assert "Download again" not in alice_client.get("/downloads/").content.decode()


def test_download_again_is_the_owners_alone_and_needs_a_post_with_csrf(user, other_user, evicted):
    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.post(f"/downloads/{evicted.pk}/retry/").status_code == 404
    assert stranger.post(f"/api/downloads/{evicted.pk}/retry").status_code == 404
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(user)
    assert owner.get(f"/downloads/{evicted.pk}/retry/").status_code == 405
    assert owner.post(f"/downloads/{evicted.pk}/retry/").status_code == 403
    assert status(evicted) == "evicted"


def test_download_again_keeps_to_the_queue_cap(alice_client, user, evicted):
    DownloadQuota.objects.create(user=user, max_queued=1)
    services.download_submit(owner=user, url=URL.format("other"))
    response = alice_client.post(f"/api/downloads/{evicted.pk}/retry")
    assert response.status_code == 429
    assert status(evicted) == "evicted"


def test_download_again_is_served_from_the_cache_when_someone_fetched_it_meanwhile(
        alice_client, user, other_user, evicted):
    again = finished(other_user, 1)  # same URL: the same asset, ready again
    assert again.asset_id == evicted.asset_id
    response = alice_client.post(f"/api/downloads/{evicted.pk}/retry")
    assert response.status_code == 200 and response.json()["status"] == "successful"


# --- The job and the schedule ----------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_the_schedule_queues_one_job_and_a_worker_does_the_work(run_worker, settings):
    owner = get_user_model().objects.create_user("carol")
    orphan = finished(owner, 1)
    Download.objects.filter(pk=orphan.pk).delete()
    old, new = finished(owner, 2, used_h_ago=5), finished(owner, 3, used_h_ago=1)
    settings.MEDIA_MAX_BYTES = SIZE

    first, second = scheduled.housekeeping(), scheduled.housekeeping()
    assert first == second
    assert Job.objects.filter(kind="downloads.housekeep").count() == 1

    run_worker(queues=["default"])
    job = Job.objects.get(kind="downloads.housekeep")
    assert job.status == JobStatus.SUCCESSFUL, job.error
    assert job.result["collected"] == {"assets": 1, "bytes": SIZE}
    assert job.result["evicted"] == {"assets": 1, "bytes": SIZE}
    assert not on_disk(orphan) and not on_disk(old) and on_disk(new)
    assert status(old) == "evicted"
    # Finished, so the next firing queues a new run.
    assert scheduled.housekeeping() != first
