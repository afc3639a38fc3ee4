"""A video opened before its shots are found: the summary first tells what is known, and when the
shots arrive the open page asks for it again and shows the new text, with no reload. The newer
summary is made because the page asked (background prefetching is off), at interactive priority.
"""

from urllib.parse import parse_qs

import pytest

from downloads import services
from downloads.models import Download
from insights import conf
from jobs import services as jobs
from jobs.models import Job, JobStatus
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - the fixture, used below
from tests.e2e.conftest import LAPTOP
from tests.e2e.test_video_journey import sample, wait_until  # noqa: F401 - sample is a fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SUMMARY_TEXT = 'section[data-kind="video_summary"] .insight[data-status="successful"] .insight-text'


def test_the_open_summary_is_written_again_when_the_shots_arrive(
        live_server, page, user, log_in, settings, tmp_path, sample, spawn_worker,  # noqa: F811
        screenshot):
    settings.MEDIA_ROOT = tmp_path / "media"
    port = sample.rsplit(":", 1)[1]
    settings.DOWNLOADS_EGRESS_ALLOW = f"127.0.0.1:{port}"
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
    env = {"MEDIA_ROOT": str(settings.MEDIA_ROOT), "DOWNLOADS_EGRESS_ALLOW": f"127.0.0.1:{port}",
           "INSIGHTS_GATEWAY_URL": "", "INSIGHTS_PREFETCH": "false"}
    # No worker takes CV jobs yet: the video is finished, its shots not found.
    spawn_worker("--queues", f"downloads,{conf.LOCAL_QUEUE}", env=env)
    download = services.download_submit(owner=user, url=f"{sample}/sample.mp4")
    wait_until(lambda: Download.objects.get(pk=download.pk).current_status == "successful")
    assert Job.objects.get(kind="downloads.segment").status == JobStatus.READY

    posts = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
    page.set_viewport_size({"width": LAPTOP, "height": 900})
    log_in(page, user)
    page.goto(f"{live_server.url}/downloads/{download.pk}/")
    page.evaluate("window.stillTheSamePage = true")  # gone if anything reloads the page
    first = page.locator(SUMMARY_TEXT)
    first.wait_for(timeout=30_000)
    assert "shots" not in first.inner_text()  # what was known: the title and the length
    assert "Waiting to find the shots." in page.inner_text("#shots")

    spawn_worker("--queues", "cv", env=env)
    page.locator(SUMMARY_TEXT, has_text="It is cut into 4 shots").wait_for(timeout=60_000)
    assert page.locator(".shot").count() == 4
    assert page.evaluate("window.stillTheSamePage") is True

    asked = [parse_qs(r.post_data or "") for r in posts if r.url.endswith("/insights/request/")]
    summaries = [body for body in asked if body.get("kind") == ["video_summary"]]
    assert len(summaries) == 2, asked  # on load, and again when the shots arrived
    assert all(body["subject"] == [str(download.asset_id)] for body in summaries)
    newer = Job.objects.filter(kind="insights.video_summary").latest("id")
    assert newer.priority == conf.INTERACTIVE and newer.status == JobStatus.SUCCESSFUL
    screenshot(page, "video-summary-after-the-shots-arrived")
