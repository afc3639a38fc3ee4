"""The home page in a real browser: the user's running and finished jobs, the running one's bar
following what its worker reports through the list's own poll, which stops once it has ended."""

import pytest
from django.utils import timezone

from downloads import progress
from downloads import services as downloads
from downloads.models import Download
from jobs import services as jobs
from jobs.engine import claiming
from jobs.models import Job, JobStatus, Worker
from tests.e2e.conftest import LAPTOP, PHONE, sideways_overflow, visit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MB = 1024 * 1024


def finished_download(owner):
    download = downloads.download_submit(owner=owner, url="https://videos.example.com/done.mp4",
                                         name="Harbour at dawn")
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL, progress=1.0,
                                                  finished_at=timezone.now())
    Download.objects.filter(pk=download.pk).update(status="successful", finished_at=timezone.now())
    return download


def claimed_download(owner):
    """A download taken by a worker, which the test then plays through the engine's API."""
    download = downloads.download_submit(owner=owner, url="https://videos.example.com/long.mp4",
                                         name="Lighthouse at night")
    worker = Worker.objects.create(name="e2e-worker", host="here", pid=1, queues=["downloads"],
                                   kinds=["downloads.fetch"])
    [job] = claiming.claim(worker, queues=["downloads"], kinds=["downloads.fetch"], limit=1)
    assert job.pk == download.job_id
    return download, job


def report(job, fraction):
    done = int(fraction * 10 * MB)
    assert jobs.report_progress(job, fraction=fraction, phase="downloading",
                                message=progress.encode(bytes_done=done, bytes_total=10 * MB))


def bar_of(page, download):
    return page.locator(f"#download-{download.pk} .bar")


@pytest.mark.parametrize("width", [PHONE, LAPTOP])
def test_the_running_download_moves_on_the_home_page_until_it_ends(live_server, page, user,
                                                                   log_in, media_root, screenshot,
                                                                   width):
    done = finished_download(user)
    running, job = claimed_download(user)
    report(job, 0.2)
    page.set_viewport_size({"width": width, "height": 844})
    log_in(page, user)
    visit(page, f"{live_server.url}/")

    rows = page.locator("#home-jobs li")
    assert rows.evaluate_all("rows => rows.map(row => row.id)") == [
        f"download-{running.pk}", f"download-{done.pk}"]
    live = page.locator(f"#download-{running.pk}")
    assert live.get_attribute("data-status") == "running"
    assert bar_of(page, running).get_attribute("aria-valuenow") == "20"
    assert "Downloading" in live.inner_text()
    assert live.locator("a.name").get_attribute("href") == f"/downloads/{running.pk}/"
    finished = page.locator(f"#download-{done.pk}")
    assert "Successful" in finished.inner_text()
    assert finished.locator("a.name").get_attribute("href") == f"/downloads/{done.pk}/"
    shot = screenshot(page, f"home-running-{width}")
    assert sideways_overflow(page) <= 0, f"the home page scrolls sideways ({shot})"

    page.evaluate("window.stillTheSamePage = true")  # gone if anything reloads the page
    report(job, 0.65)
    page.locator(f"#download-{running.pk} .bar[aria-valuenow='65']").wait_for()
    assert page.locator("#home-jobs").get_attribute("hx-trigger") == "every 2s"

    assert jobs.complete_many([(job, {"asset": running.asset_id})]) == [job.pk]
    page.locator(f"#download-{running.pk}[data-status=successful]").wait_for()
    assert bar_of(page, running).get_attribute("aria-valuenow") == "100"
    assert page.locator("#home-jobs").get_attribute("hx-trigger") is None  # the poll stopped
    assert page.evaluate("window.stillTheSamePage") is True
    assert page.locator("#home-jobs h2").all_inner_texts() == ["Recently ended"]
    screenshot(page, f"home-ended-{width}")


@pytest.mark.parametrize("width", [PHONE, LAPTOP])
def test_an_empty_home_page_leads_to_the_first_download(live_server, page, user, log_in,
                                                         screenshot, settings, width):
    settings.DOWNLOADS_EGRESS_ALLOW = "127.0.0.1:8001"  # as `make run` starts the site
    settings.HAULAGE_SAMPLE_URL = "http://127.0.0.1:8001/sample.mp4"
    page.set_viewport_size({"width": width, "height": 844})
    log_in(page, user)
    visit(page, f"{live_server.url}/")
    start = page.locator("#home-jobs .home-start")
    assert "http://127.0.0.1:8001/sample.mp4" in start.inner_text()
    shot = screenshot(page, f"home-empty-{width}")
    assert sideways_overflow(page) <= 0, f"the empty home page scrolls sideways ({shot})"
    start.get_by_role("link", name="Downloads page").click()
    page.wait_for_url("**/downloads/#id_url")
    assert page.locator("input[name=url]").is_visible()
