import os

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from tests.servers import PostgresServer, need



def is_postgres():
    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("postgres") and connection.vendor != "postgresql":
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL (this pass runs on SQLite)"))


@pytest.fixture
def pg_server():
    need("PostgreSQL", is_postgres() and "TEST_PG_DATA" in os.environ)
    server = PostgresServer()
    yield server
    # Whatever the test did, leave the server running for the next one.
    try:
        server.start()
    except Exception:
        pass


@pytest.fixture
def redis_url():
    url = os.environ.get("TEST_REDIS_URL")
    need("Redis (TEST_REDIS_URL)", bool(url))
    return url


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice", password="correct-horse-9")


@pytest.fixture
def other_user(db):
    return get_user_model().objects.create_user("bob", password="battery-staple-7")


@pytest.fixture
def staff_user(db):
    return get_user_model().objects.create_superuser("root", password="staff-password-3")


@pytest.fixture
def alice_client(client, user):
    client.force_login(user)
    return client


# --- Real browser (Playwright driving Debian's Chromium) -------------------
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    need("Chromium (/usr/bin/chromium)", os.path.exists(CHROMIUM))
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
        ],
    }
