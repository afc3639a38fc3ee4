"""A person subscribes to a feed in a real browser, watches the first check land, pauses and
removes the subscription, with a real worker behind."""

import pytest

from downloads.models import Download
from subscriptions.models import Subscription
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - the fixture, used below
from tests.integration.test_subscriptions import publish
from tests.origin import Origin

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def origin():
    with Origin() as server:
        yield server


def test_subscribe_watch_the_first_check_pause_and_remove(live_server, page, django_user_model,
                                                          settings, tmp_path, origin,
                                                          spawn_worker):  # noqa: F811
    settings.MEDIA_ROOT = tmp_path / "media"
    allowed = f"127.0.0.1:{origin.port}"
    settings.DOWNLOADS_EGRESS_ALLOW = allowed
    feed = publish(origin, 3)
    spawn_worker("--queues", "subscriptions", env={
        "MEDIA_ROOT": str(settings.MEDIA_ROOT), "DOWNLOADS_EGRESS_ALLOW": allowed})
    django_user_model.objects.create_user("dora", password="explorer-pass-1")

    page.goto(f"{live_server.url}/subscriptions/")
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "explorer-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/subscriptions/")
    page.fill("input[name=url]", feed)
    page.select_option("select[name=interval_s]", "3600")
    page.click("form.add-subscription button[type=submit]")

    row = page.locator("li.subscription").first
    # The row polls until the check's job has ended, then comes back without its trigger.
    # The handler writes the result before its job ends, so a poll between the two
    # shows the result while the row still polls: wait for the idle row itself.
    page.locator("li.subscription:not([hx-trigger]) p.result").wait_for(timeout=60_000)
    assert "Found 3 new entries, requested 3 downloads." in row.inner_text()
    assert row.get_attribute("hx-trigger") is None
    assert row.locator("ul.made a").count() == 3
    assert Download.objects.count() == 3

    row.locator("button", has_text="Pause").click()
    page.locator("li.subscription[data-state=paused]").wait_for()
    assert Subscription.objects.get().paused

    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("li.subscription button", has_text="Remove").click()
    page.locator("li.subscription").wait_for(state="detached")
    assert not Subscription.objects.exists()
    assert Download.objects.count() == 3  # its downloads stay
