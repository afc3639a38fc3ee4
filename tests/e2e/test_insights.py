"""In a real browser: the panel asks for its insight on load, polls, and shows the text; the queue
page shows the job it ran."""

import threading

import pytest

from insights import conf
from jobs import services as jobs
from jobs.worker import Worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(fast_engine, settings):
    settings.INSIGHTS_GATEWAY_URL = ""  # the local generator
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
    running = Worker(queues=[conf.QUEUE], concurrency=1)
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
    assert page.inner_text('tr[data-queue="insights"] .cooldown') == "30 minutes"
