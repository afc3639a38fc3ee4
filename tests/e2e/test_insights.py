"""In a real browser: the panel asks for its insight on load, polls, and shows the text; the queue
page shows the job it ran."""

import signal
import threading

import pytest

from insights import conf
from jobs import services as jobs
from jobs.models import Worker as WorkerRow
from jobs.runtime.worker import Worker
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - the fixture, used below
from tests.e2e.test_video_journey import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(fast_engine, settings):
    settings.INSIGHTS_GATEWAY_URL = ""  # the local generator
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
    running = Worker(queues=[conf.queue()], concurrency=1)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    yield running
    running.request_stop()
    thread.join(15)


def test_the_library_panel_is_requested_generated_and_shown(live_server, page, django_user_model,
                                                             worker):
    django_user_model.objects.create_user("dora", password="explorer-pass-1")
    page.goto(f"{live_server.url}/accounts/login/?next=/insights/")
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "explorer-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/insights/")

    done = page.wait_for_selector('.insight[data-status="successful"]', timeout=20_000)
    assert "Your library is empty so far" in done.inner_text()
    assert "Generated locally" in done.inner_text()

    page.goto(f"{live_server.url}/queue/")
    row = page.wait_for_selector('tr[data-kind="insights.library_overview"]')
    assert row.get_attribute("data-status") == "successful"
    assert "1 / 3" in row.inner_text()
    assert page.inner_text(f'tr[data-queue="{conf.LOCAL_QUEUE}"] .cooldown') == "30 minutes"


def test_a_look_at_the_panel_that_fails_is_followed_by_another(live_server, page, user, log_in,
                                                                settings, spawn_worker):  # noqa: F811
    """The panel's quick look, made when the text is a moment away, is lost (a dropped
    connection): the panel keeps polling, so the text still arrives without a reload."""
    settings.INSIGHTS_GATEWAY_URL = ""  # the local generator: its text is a moment away
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
    worker = spawn_worker("--queues", conf.queue(), env={"INSIGHTS_GATEWAY_URL": ""})
    wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).exists())
    worker.send_signal(signal.SIGSTOP)  # it serves the kind, but takes nothing for now
    looks = []

    def first_look_lost(route):
        looks.append(route.request.url)
        if len(looks) == 1:
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/insights/*/panel/", first_look_lost)
    log_in(page, user)
    page.goto(f"{live_server.url}/insights/")
    page.wait_for_selector('.insight[data-status="ready"]')
    assert "Queued — next in line." in page.inner_text(".insight")
    page.wait_for_timeout(600)  # the quick look, 250 ms after the panel appeared, is lost
    assert looks, "the panel looked quickly"
    worker.send_signal(signal.SIGCONT)
    done = page.wait_for_selector('.insight[data-status="successful"]', timeout=20_000)
    assert "Your library is empty so far" in done.inner_text()
    assert len(looks) >= 2
