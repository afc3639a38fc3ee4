"""Password guessing is throttled: ten failed logins for one account, or from one address, within
the window, and the next attempt is refused with a 429 before its password is checked, on the
site's login and the admin's; password resets are throttled per e-mail and per address."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_login_failed
from django.urls import reverse

from core.throttle import client_address

pytestmark = pytest.mark.django_db

REFUSED = "Too many failed attempts to log in"


@pytest.fixture
def checked_passwords():
    """How many passwords were checked and found wrong."""
    failures = []

    def count(sender, **kwargs):
        failures.append(kwargs["credentials"].get("username"))

    user_login_failed.connect(count)
    yield failures
    user_login_failed.disconnect(count)


LOGINS = {
    "site": ("login", "alice", "correct-horse-9"),
    "admin": ("admin:login", "root", "staff-password-3"),
}


@pytest.fixture(params=sorted(LOGINS))
def login(request, user, staff_user, client):
    name, username, password = LOGINS[request.param]

    def attempt(password, username=username, address="127.0.0.1"):
        return client.post(reverse(name), {"username": username, "password": password},
                           REMOTE_ADDR=address)

    attempt.password = password
    attempt.client = client
    return attempt


def logged_in(client):
    return "_auth_user_id" in client.session


def test_the_eleventh_attempt_is_refused_unchecked_and_allowed_after_the_window(
        login, checked_passwords, settings):
    for _ in range(10):
        answer = login("wrong-password")
        assert answer.status_code == 200 and REFUSED not in answer.content.decode()
    assert len(checked_passwords) == 10

    wrong = login("wrong-again")
    assert wrong.status_code == 429 and REFUSED in wrong.content.decode()
    right = login(login.password)
    assert right.status_code == 429 and REFUSED in right.content.decode()
    assert not logged_in(login.client)
    assert len(checked_passwords) == 10  # neither password was checked

    settings.LOGIN_THROTTLE_WINDOW_SECONDS = 0.2
    time.sleep(0.3)  # the failures are older than the window now
    assert login(login.password).status_code == 302
    assert logged_in(login.client)


def test_failures_from_one_address_count_whatever_account_they_name(login, settings):
    for n in range(10):
        assert login("guess", username=f"someone-{n}").status_code == 200
    assert login(login.password).status_code == 429  # the right password, the same address
    assert login(login.password, address="192.0.2.44").status_code == 302  # another address


def test_a_login_that_succeeds_counts_for_nothing(login):
    for _ in range(10):
        assert login(login.password).status_code == 302
        login.client.logout()
    for _ in range(10):
        assert login("wrong-password").status_code == 200
    assert login("wrong-password").status_code == 429


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(rf, settings):
    request = rf.get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.7, 198.51.100.9")
    settings.BEHIND_PROXY = False
    assert client_address(request) == "10.0.0.2"  # a client writes that header as it likes
    settings.BEHIND_PROXY = True
    assert client_address(request) == "198.51.100.9"
    assert client_address(rf.get("/", REMOTE_ADDR="2001:db8:1:2:3::9")) == "2001:db8:1:2::/64"


# --- Password resets ----------------------------------------------------------------------


@pytest.fixture
def reset(client, mailoutbox, db):
    get_user_model().objects.create_user("carol", email="carol@example.com", password="x-long-pass-1")

    def ask(email, address="127.0.0.1"):
        return client.post(reverse("password_reset"), {"email": email}, REMOTE_ADDR=address)

    ask.outbox = mailoutbox
    return ask


def test_password_resets_are_throttled_per_e_mail(reset, settings):
    settings.PASSWORD_RESET_THROTTLE_LIMIT = 3
    for n in range(3):
        assert reset("carol@example.com", address=f"192.0.2.{n}").status_code == 302
    assert len(reset.outbox) == 3
    refused = reset("Carol@Example.com", address="192.0.2.99")
    assert refused.status_code == 429 and "Too many password resets" in refused.content.decode()
    assert len(reset.outbox) == 3  # no more mail


def test_password_resets_are_throttled_per_address(reset, settings):
    settings.PASSWORD_RESET_THROTTLE_LIMIT = 3
    for n in range(3):
        assert reset(f"nobody-{n}@example.com").status_code == 302  # unknown: still counted
    assert reset("carol@example.com").status_code == 429
    assert reset.outbox == []
    assert reset("carol@example.com", address="192.0.2.50").status_code == 302
    assert len(reset.outbox) == 1
