"""A person pastes a URL in a real browser and watches the bar fill, with a real worker behind."""

import re
import time

import pytest

from downloads.models import Download
from tests import media
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - the fixture, used below
from tests.origin import Origin

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
MB = 1024 * 1024


@pytest.fixture
def origin():
    with Origin() as server:
        yield server


def test_submit_a_url_and_watch_the_bar_reach_100(live_server, page, django_user_model, settings,
                                                  tmp_path, origin, spawn_worker):  # noqa: F811
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.DOWNLOADS_EGRESS_ALLOW = f"127.0.0.1:{origin.port}"
    source = media.padded_mp4(3 * MB, seed=30)
    # Six seconds of transfer: long enough for the page to show it part-way on a busy machine.
    url = origin.add_file("/films/holiday.mp4", source, throttle_bytes_s=MB // 2)
    spawn_worker("--queues", "downloads", env={
        "MEDIA_ROOT": str(settings.MEDIA_ROOT), "DOWNLOADS_EGRESS_ALLOW": f"127.0.0.1:{origin.port}"})
    django_user_model.objects.create_user("dora", password="explorer-pass-1")

    page.goto(f"{live_server.url}/downloads/")
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "explorer-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/downloads/")
    page.fill("input[name=url]", url)
    page.select_option("select[name=format]", "best")
    page.click("form.submit-download button[type=submit]")

    row = page.locator("li.download").first
    row.wait_for()
    assert re.search(r"You use 0\sbytes", page.inner_text("#storage"))
    page.evaluate("window.stillTheSamePage = true")  # gone if anything reloads the page
    seen, deadline = set(), time.monotonic() + 60
    while time.monotonic() < deadline:
        value = row.locator(".bar").get_attribute("aria-valuenow")
        if value is not None:
            seen.add(int(value))
        if row.get_attribute("data-status") in ("successful", "failed"):
            break
        page.wait_for_timeout(100)
    assert row.get_attribute("data-status") == "successful", row.inner_text()
    assert row.locator(".bar").get_attribute("aria-valuenow") == "100"
    assert re.search(r"width: 100(\.0)?%", row.locator(".bar span").get_attribute("style"))
    assert any(0 < value < 100 for value in seen), seen  # it moved, not just jumped
    assert row.get_attribute("hx-trigger") is None  # the finished row stopped polling
    assert "Successful" in row.inner_text()
    # The storage line follows the finished row by itself.
    page.locator("#storage", has_text=re.compile(r"You use [1-9][\d.]*\sMB")).wait_for()
    assert page.evaluate("window.stillTheSamePage") is True

    download = Download.objects.get()
    page.click(f"a[href='/downloads/{download.pk}/']")
    player = page.locator("video#player")
    player.wait_for()
    assert player.get_attribute("src") == f"/downloads/{download.pk}/file/"
    # The browser's own range request for the video is answered with the file's bytes.
    assert page.evaluate("""async (src) => {
        const r = await fetch(src, {headers: {Range: 'bytes=0-7'}});
        return r.status + ':' + (await r.arrayBuffer()).byteLength;
    }""", player.get_attribute("src")) == "206:8"
