"""A new user's journey in Chromium, with a real runworker behind the site: paste the sample's
address, watch it finish and be split into shots, open the video, read its summary and a shot's
notes, never reloading the page.

The worker runs as on a newcomer's machine: no system ffmpeg or ffprobe on its PATH (only
imageio-ffmpeg's binary), and no AI gateway (the local generator)."""

import json
import re
import time
from urllib.parse import parse_qs

import pytest

from downloads import demo
from downloads.models import Download, Shot
from insights import conf
from jobs import services as jobs
from jobs.models import Job
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - the fixture, used below
from tests.e2e.conftest import LAPTOP
from tests.media import path_without_ffmpeg

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sample(tmp_path):
    """The sample `make run` serves (four shots with hard cuts), small, on a loopback port."""
    folder = demo.generate(tmp_path / "demo", width=320, height=240)
    server = demo.serve(("127.0.0.1", 0), folder)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def wait_until(predicate, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s")


def test_the_sample_from_its_address_to_its_summary_and_a_shots_notes(
        live_server, page, django_user_model, settings, tmp_path, sample, spawn_worker,  # noqa: F811
        screenshot):
    settings.MEDIA_ROOT = tmp_path / "media"
    port = sample.rsplit(":", 1)[1]
    settings.DOWNLOADS_EGRESS_ALLOW = f"127.0.0.1:{port}"
    settings.INSIGHTS_GATEWAY_URL = ""
    # The gateway's etiquette, which the local generator's insights must not wait for.
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=20)
    # Nothing prepared in the background: the summary is made because the page asked, so the
    # time below is a cold request on an idle queue.
    spawn_worker(env={
        "MEDIA_ROOT": str(settings.MEDIA_ROOT), "DOWNLOADS_EGRESS_ALLOW": f"127.0.0.1:{port}",
        "INSIGHTS_GATEWAY_URL": "", "INSIGHTS_PREFETCH": "false",
        "PATH": path_without_ffmpeg(tmp_path / "bin")})
    django_user_model.objects.create_user("dora", password="explorer-pass-1")
    page.set_viewport_size({"width": LAPTOP, "height": 900})

    page.goto(f"{live_server.url}/downloads/")
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "explorer-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/downloads/")
    page.fill("input[name=url]", f"{sample}/sample.mp4")
    page.click("form.submit-download button[type=submit]")
    page.wait_for_selector("li.download[data-status='successful']", timeout=60_000)

    download = Download.objects.get()
    # Split into shots, and the queue idle again, before the video is opened.
    wait_until(lambda: Shot.objects.filter(asset=download.asset).count() >= 3)
    wait_until(lambda: not Job.objects.live().exists())

    posts = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
    opened = time.monotonic()
    page.click(f"a.name[href='/downloads/{download.pk}/']")
    page.wait_for_url(f"**/downloads/{download.pk}/")
    page.evaluate("window.stillTheSamePage = true")  # gone if anything reloads the page
    summary = page.locator('section[data-kind="video_summary"] .insight[data-status="successful"]')
    summary.wait_for(timeout=30_000)
    seconds_to_summary = time.monotonic() - opened
    (tmp_path / "time-to-summary.json").write_text(json.dumps({"seconds": seconds_to_summary}))
    print(f"time to the summary: {seconds_to_summary:.2f} s")
    text = summary.locator(".insight-text").inner_text()
    title = Download.objects.select_related("asset").get().asset.title
    assert title and f"“{title}”" in text, text

    # It was asked for by the page's own POST, at interactive priority, and the page never
    # reloaded to show it.
    asked = [parse_qs(r.post_data or "") for r in posts if r.url.endswith("/insights/request/")]
    assert {"kind": ["video_summary"], "subject": [str(download.asset_id)]}.items() <= \
        asked[0].items()
    job = Job.objects.get(kind="insights.video_summary")
    assert job.priority == conf.INTERACTIVE and job.owner.username == "dora"
    assert [r for r in posts if r.resource_type == "document"] == []
    assert page.evaluate("window.stillTheSamePage") is True

    # Choosing a shot (its times) opens its notes beside the player. Nobody measured the shot
    # yet: the notes ask for its analysis first and describe what it found.
    shot = Shot.objects.get(asset=download.asset, index=2)
    assert shot.analysis is None
    clicked = time.monotonic()
    page.locator(".shot[data-index='2'] a[data-seek]").click()
    notes = page.locator('#shot-notes .insight[data-status="successful"]')
    notes.wait_for(timeout=30_000)
    seconds_to_notes = time.monotonic() - clicked
    (tmp_path / "time-to-notes.json").write_text(json.dumps({"seconds": seconds_to_notes}))
    print(f"click on a shot to its notes: {seconds_to_notes:.2f} s")
    shot.refresh_from_db()
    text = notes.inner_text()
    assert f"Shot 3 of “{title}”" in text
    assert "not been analysed" not in text
    written = re.search(r"brightness (\d\.\d\d)", text)  # what the analysis measured
    assert written and abs(float(written.group(1)) - shot.analysis["brightness"]) <= 0.006, text
    assert page.locator(".shot.selected").get_attribute("data-index") == "2"
    assert Job.objects.get(kind="insights.shot_notes").priority == conf.INTERACTIVE
    assert page.evaluate("window.stillTheSamePage") is True
    screenshot(page, "video-page-with-summary-and-notes")
