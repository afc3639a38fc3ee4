"""A dead Redis, said plainly: CV requests answer 503 naming the CV queue, waiting jobs say why.

`REDIS_URL` points at a real TCP port nobody listens on, so every command
fails the way it does when the server is down (connection refused).
"""

import socket

import pytest

from downloads import services
from downloads.models import Download, MediaAsset, Shot
from jobs.cv import clients
from jobs.cv.monitor import Monitor
from jobs.engine import claiming
from jobs.models import Job, JobEvent, JobStatus, Outcome
from jobs.models import Worker as WorkerRow
from jobs.selectors import standing as selectors

pytestmark = pytest.mark.django_db(transaction=True)


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends


@pytest.fixture
def dead_redis(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    clients._clients.clear()
    yield settings.REDIS_URL
    clients._clients.clear()


@pytest.fixture
def video(dead_redis, owner):
    """A finished video download (no file needed: nothing here gets as far as a CV worker)."""
    download = services.download_submit(owner=owner, url="https://videos.example.com/shots.mp4")
    MediaAsset.objects.filter(pk=download.asset_id).update(
        state="ready", file=f"assets/{download.asset_id}/media.mp4", size_bytes=1, duration_s=20.0)
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL)
    Download.objects.filter(pk=download.pk).update(status="successful")
    return Download.objects.select_related("asset").get(pk=download.pk)


def cv_jobs():
    return Job.objects.filter(kind__in=["downloads.segment", "downloads.analyze"])


def assert_names_the_cv_queue(response):
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["error_code"] == "cv_queue_unavailable" and body["queue"] == "cv"
    assert "Redis" in body["error"]


def test_asking_for_a_segmentation_is_a_503_naming_the_cv_queue(video, client_of):
    assert_names_the_cv_queue(client_of.post(f"/api/downloads/{video.pk}/segment/"))
    assert not cv_jobs().exists()


def test_asking_for_an_analysis_is_a_503_naming_the_cv_queue(video, client_of):
    shot = Shot.objects.create(asset=video.asset, index=0, start_s=0, end_s=5)
    assert_names_the_cv_queue(client_of.post(f"/api/shots/{shot.pk}/analyze/"))
    assert not cv_jobs().exists()


@pytest.mark.parametrize("name", ["segment", "analyze"])
def test_the_page_actions_say_so_in_the_panel(video, client_of, name):
    Shot.objects.create(asset=video.asset, index=0, start_s=0, end_s=5)
    # In the panel htmx swaps in (it swaps no 5xx answer), and as a message after a plain POST.
    response = client_of.post(f"/downloads/{video.pk}/shots/{name}/", headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Redis server is unreachable" in response.content.decode()
    response = client_of.post(f"/downloads/{video.pk}/shots/{name}/", follow=True)
    assert "Redis server is unreachable" in response.content.decode()
    assert not cv_jobs().exists()


def test_a_job_sent_back_by_a_dead_redis_says_redis_is_unreachable(video, owner):
    from downloads import shots

    job = shots.asset_segment(video.asset, owner=owner, check_transport=False)
    worker = WorkerRow.objects.create(name="w", host="h", pid=1)
    [claimed] = claiming.claim(worker, queues=["cv"], kinds=["downloads.segment"], limit=1)
    Monitor(worker=None).adopt([claimed])  # the publish fails: the job goes back to the queue
    job.refresh_from_db()
    assert (job.status, job.attempts, job.error_code) == (JobStatus.READY, 0, "redis_unavailable")
    standing = selectors.standing(job, served_kinds={"downloads.segment"})
    assert standing.reason == "transport_unavailable"
    assert "Redis" in standing.message and "unreachable" in standing.message
    event = JobEvent.objects.get(job=job, kind=Outcome.REQUEUED)
    assert "shutdown" not in event.get_kind_display()
    assert "Redis" in event.reason
