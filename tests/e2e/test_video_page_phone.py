"""The video page on a phone: what a tap on a shot shows comes into view. The notes sit below every
shot and the player a screen above them, so without scrolling a tap would change nothing the
user can see."""

import pytest

from downloads.models import Shot
from tests.e2e.conftest import PHONE, visit
from tests.e2e.test_pages_fit import library  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IN_VIEW = """(selector) => {
    const box = document.querySelector(selector).getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight;
}"""


def test_a_shots_notes_and_its_player_come_into_view_on_a_phone(live_server, page, library,  # noqa: F811
                                                                 log_in, screenshot):
    video = library["video"]
    Shot.objects.bulk_create(Shot(asset=video.asset, index=i, start_s=i * 5.0, end_s=i * 5.0 + 5)
                             for i in range(4, 12))  # a video of a dozen shots
    page.set_viewport_size({"width": PHONE, "height": 844})
    log_in(page, library["user"])
    visit(page, f"{live_server.url}/downloads/{video.pk}/")

    notes = page.locator(".shot[data-index='1'] button[data-shot-notes]")
    notes.scroll_into_view_if_needed()
    assert not page.evaluate(IN_VIEW, "#shot-notes")  # below the shots, off the screen
    notes.click()
    page.locator("#shot-notes .insight").wait_for()
    page.wait_for_function(IN_VIEW, arg="#shot-notes")
    assert "Shot notes" in page.inner_text("#shot-notes")
    assert page.locator(".shot.selected").get_attribute("data-index") == "1"
    screenshot(page, f"video-shot-notes-{PHONE}")

    times = page.locator(".shot[data-index='2'] a[data-seek]")
    times.scroll_into_view_if_needed()
    assert not page.evaluate(IN_VIEW, "#player")
    times.click()
    page.wait_for_function(IN_VIEW, arg="#player")
    assert page.locator(".shot.selected").get_attribute("data-index") == "2"
