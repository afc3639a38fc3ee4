"""Shots of a downloaded video, found and measured by CV jobs (local mode: the embedded CV worker)."""

import shutil

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from downloads import services, shots, storage
from downloads.models import Download, MediaAsset, Shot
from jobs.cv import clients
from jobs.exceptions import IllegalTransition
from jobs.models import Job, JobStatus
from tests import media

pytestmark = pytest.mark.django_db(transaction=True)
FRAME_S = 1 / 25


def fetch(client, url):
    """(status, content type, body) of a file response, closed (it holds the file open)."""
    response = client.get(url)
    try:
        body = b"".join(response.streaming_content) if response.streaming else response.content
        return response.status_code, response.get("Content-Type"), body
    finally:
        response.close()


@pytest.fixture
def local_mode(settings, tmp_path):
    settings.REDIS_URL = ""
    settings.MEDIA_ROOT = tmp_path / "media"
    clients._clients.clear()
    yield
    clients._clients.clear()


@pytest.fixture
def video(local_mode, owner):
    """A finished download of the four-shot sample (cuts at 5, 10 and 15 s)."""
    download = services.download_submit(owner=owner, url="https://videos.example.com/shots.mp4")
    asset = download.asset
    storage.asset_dir(asset.pk).mkdir(parents=True)
    shutil.copy(media.shots_mp4(), storage.asset_dir(asset.pk) / "media.mp4")
    MediaAsset.objects.filter(pk=asset.pk).update(
        state="ready", file=f"assets/{asset.pk}/media.mp4", size_bytes=1, duration_s=20.0)
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL)
    Download.objects.filter(pk=download.pk).update(status="successful")
    return Download.objects.select_related("asset").get(pk=download.pk)


def test_segment_then_analyze_through_the_cv_queue(video, owner, client_of, run_worker):
    response = client_of.post(f"/api/downloads/{video.pk}/segment/")
    assert response.status_code == 202
    assert response.json()["segment"]["status"] == "ready"
    run_worker(queues=["cv"], timeout=60)

    listed = client_of.get(f"/api/downloads/{video.pk}/shots/").json()
    assert listed["segment"]["status"] == "successful", listed["segment"]
    starts = [shot["start_s"] for shot in listed["shots"]]
    assert len(starts) == 4
    for found, cut in zip(starts, (0, 5, 10, 15), strict=True):
        assert abs(found - cut) <= FRAME_S + 1e-6
    first = listed["shots"][0]
    assert first["analysis"] is None
    status, content_type, body = fetch(client_of, first["thumbnail_url"])
    assert (status, content_type, body[:3]) == (200, "image/jpeg", b"\xff\xd8\xff")

    shot = Shot.objects.get(asset=video.asset, index=1)
    response = client_of.post(f"/api/shots/{shot.pk}/analyze/")
    assert response.status_code == 202
    run_worker(queues=["cv"], timeout=60)
    analysed = client_of.get(f"/api/downloads/{video.pk}/shots/").json()["shots"][1]
    analysis = analysed["analysis"]
    assert analysis["duration_s"] == pytest.approx(5.0, abs=0.1)
    assert 0 < analysis["brightness"] < 1
    assert analysis["motion"] and analysis["colors"]
    assert fetch(client_of, analysis["keyframe_strip_url"])[0] == 200
    page = client_of.get(f"/downloads/{video.pk}/").content.decode()
    assert "Analyse all shots" in page and "0:05.0–0:10.0" in page and "<polyline" in page


def test_analyse_all_and_segment_again_replace_the_old_images(video, owner, client_of, run_worker,
                                                             settings):
    first = shots.asset_segment(video.asset, owner=owner)
    run_worker(queues=["cv"], timeout=60)
    old_folder = settings.MEDIA_ROOT / "cv" / str(first.pk)
    assert old_folder.exists()
    client_of.post(f"/downloads/{video.pk}/shots/analyze/", HTTP_HX_REQUEST="true")
    assert Job.objects.filter(kind="downloads.analyze").count() == 4
    partial = client_of.get(f"/downloads/{video.pk}/shots/").content.decode()
    assert 'hx-trigger="every 2s"' in partial  # polls while the CV jobs run
    run_worker(queues=["cv"], timeout=90)
    assert all(shot.analysis for shot in Shot.objects.filter(asset=video.asset))
    done = client_of.get(f"/downloads/{video.pk}/shots/").content.decode()
    assert "hx-trigger" not in done
    second = shots.asset_segment(video.asset, owner=owner)
    run_worker(queues=["cv"], timeout=60)
    assert Job.objects.get(pk=second.pk).status == JobStatus.SUCCESSFUL
    assert Shot.objects.filter(asset=video.asset).count() == 4
    assert all(shot.analysis is None for shot in Shot.objects.filter(asset=video.asset))
    assert not old_folder.exists()


def test_shots_belong_to_holders_only(video, run_worker):
    shots.asset_segment(video.asset)
    run_worker(queues=["cv"], timeout=60)
    stranger = Client()
    stranger.force_login(get_user_model().objects.create_user("eve"))
    shot = Shot.objects.filter(asset=video.asset).first()
    assert stranger.get(f"/api/downloads/{video.pk}/shots/").status_code == 404
    assert stranger.post(f"/api/downloads/{video.pk}/segment/").status_code == 404
    assert stranger.post(f"/api/shots/{shot.pk}/analyze/").status_code == 404
    assert fetch(stranger, f"/downloads/{video.pk}/shots/0/thumbnail.jpg")[0] == 404
    assert not Job.objects.filter(kind="downloads.analyze").exists()


def test_an_unfinished_or_audio_download_has_no_shots(local_mode, owner, client_of):
    queued = services.download_submit(owner=owner, url="https://videos.example.com/q.mp4")
    response = client_of.post(f"/api/downloads/{queued.pk}/segment/")
    assert response.status_code == 409
    audio = services.download_submit(owner=owner, url="https://videos.example.com/q.mp4",
                                     fmt="audio")
    MediaAsset.objects.filter(pk=audio.asset_id).update(state="ready", file="assets/x.m4a")
    Download.objects.filter(pk=audio.pk).update(status="successful", job=None)
    response = client_of.post(f"/api/downloads/{audio.pk}/segment/")
    assert response.status_code == 409
    assert "finished video" in response.json()["error"]


def test_no_cv_job_is_queued_on_a_file_evicted_meanwhile(video, owner, run_worker):
    shots.asset_segment(video.asset)
    run_worker(queues=["cv"], timeout=60)
    shot = Shot.objects.select_related("asset").filter(asset=video.asset).first()
    asset = MediaAsset.objects.get(pk=video.asset_id)  # read while still ready
    # Housekeeping evicts the file between the page's read and the click.
    assert services.asset_evict(asset.pk) == "evicted"
    before = Job.objects.filter(kind__in=["downloads.segment", "downloads.analyze"]).count()
    with pytest.raises(IllegalTransition):
        shots.asset_segment(asset, owner=owner)
    with pytest.raises(IllegalTransition):
        shots.shot_analyze(shot, owner=owner)
    assert Job.objects.filter(kind__in=["downloads.segment", "downloads.analyze"]).count() == before
