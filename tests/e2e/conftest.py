import os
import shutil
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

# Playwright's sync API runs an event loop in this thread; Django's ORM calls
# made by the test itself are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

PHONE, LAPTOP = 390, 1280  # viewport widths, px


@pytest.fixture(autouse=True)
def no_request_outlives_its_test(live_server, transactional_db):
    """After the browser has closed (its fixture ends first), end the live server's sessions
    before the database is emptied: a request still in flight holds row locks the emptying
    TRUNCATE waits behind while it waits for the TRUNCATE, a deadlock that leaves the rows
    for every later test of that process."""
    yield
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture
def log_in(live_server):
    """Give the browser a session for a user (the login form itself is tested elsewhere)."""

    def log_in(page, user):
        client = Client()
        client.force_login(user)
        page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                                   "url": live_server.url}])

    return log_in


@pytest.fixture
def screenshot(tmp_path, request):
    """Save a full-page PNG of `page` as the test's artifact; returns its path.

    Under the test's temporary folder (pytest keeps the last three runs), and copied to
    $SCREENSHOT_DIR when that is set.
    """
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)

    def take(page, name):
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if os.environ.get("SCREENSHOT_DIR"):
            target = Path(os.environ["SCREENSHOT_DIR"])
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target / path.name)
        return path

    return take


# Settled: no htmx request in flight and none still to be sent on load (an element whose
# request fires on load is replaced by the answer). Playwright's "networkidle" is not used:
# it waits on the browser's own count of open requests, which once stayed above zero for
# 30 s on a static admin list whose every request had been answered.
SETTLED = "() => !document.querySelector('.htmx-request, [hx-trigger=load]')"


def visit(page, url):
    """Open `url` and wait until the page has loaded and its panels' first requests are answered."""
    page.goto(url)
    page.wait_for_function(SETTLED)


def sideways_overflow(page):
    """How many px the page scrolls sideways (0 when it fits the viewport's width)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
