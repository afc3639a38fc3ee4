import os
import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from tests.servers import PostgresServer, need


def is_postgres():
    return connection.vendor == "postgresql"


# The fuzz layer's figures. Here, not in tests/fuzz/: under pytest-xdist only
# the workers load that folder's conftest, and the summary is the controller's.
def pytest_sessionfinish(session):
    from tests.fuzz.harness import STATS

    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand them to the controller
        session.config.workeroutput["fuzz_stats"] = dict(STATS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    from tests.fuzz.harness import STATS

    STATS.update(getattr(node, "workeroutput", {}).get("fuzz_stats", {}))


def pytest_terminal_summary(terminalreporter):
    from tests.fuzz.harness import STATS

    if STATS["requests"]:
        by_status = ", ".join(f"{k[7:]}: {v}" for k, v in sorted(STATS.items())
                              if k.startswith("status "))
        terminalreporter.write_line(
            f"fuzz: {STATS['examples']} examples, {STATS['requests']} requests ({by_status})")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("postgres") and connection.vendor != "postgresql":
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL (this pass runs on SQLite)"))


@pytest.fixture
def pg_server(request):
    # Every parallel worker's test database lives on this one server.
    assert request.node.get_closest_marker("serial"), \
        "a test that stops PostgreSQL stops every other test's database: mark it serial"
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


# --- The engine -------------------------------------------------------------
import tests.handlers  # noqa: E402,F401 - registers the test kinds


@pytest.fixture
def fast_engine(settings):
    """Short timings so recovery tests take seconds."""
    settings.JOBS_LEASE_SECONDS = 3
    settings.JOBS_HEARTBEAT_SECONDS = 1
    settings.JOBS_RESCUE_INTERVAL_SECONDS = 1
    settings.JOBS_POLL_SECONDS = 0.5
    settings.JOBS_SHUTDOWN_GRACE_SECONDS = 2
    settings.JOBS_PROGRESS_INTERVAL_SECONDS = 0
    return settings


@pytest.fixture
def run_worker(fast_engine):
    """Run an in-process Worker until it has nothing left (`--burst`), then return it."""
    from jobs.runtime.worker import Worker

    def run(timeout=30, **options):
        options.setdefault("burst", True)
        options.setdefault("concurrency", 4)
        worker = Worker(**options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        thread.join(timeout)
        assert not thread.is_alive(), "the worker did not finish in time"
        return worker

    return run


@pytest.fixture(autouse=True)
def _fresh_queue_settings():
    """Each test starts without queue settings cached by an earlier one, nor a pause of the
    one-statement claim an earlier one's jobs with keys began."""
    from jobs.engine import claiming, limits

    limits.forget_queue_settings()
    claiming._plain_paused_until.clear()


@pytest.fixture(autouse=True)
def _spinning_as_at_start(monkeypatch):
    """`runworker` stops spinning for its whole process (jobs/engine/dbwait.py): a test that runs it in
    this process must not leave the rest of this process's tests without the spin."""
    from jobs.engine import dbwait

    monkeypatch.setattr(dbwait, "_spinning", dbwait._spinning)  # put back when the test ends


# --- Loopback HTTP origins for downloads --------------------------------------
@pytest.fixture
def origin():
    """A loopback origin the test admits through the egress policy."""
    from tests.origin import Origin

    with Origin() as server:
        yield server


@pytest.fixture
def elsewhere():
    """A second loopback server that nothing admits: it must never see a request."""
    from tests import media
    from tests.origin import Origin

    with Origin() as server:
        server.add_file("/clip.mp4", media.short_mp4())
        server.add_folder("/hls", media.hls_rendition())
        yield server


@pytest.fixture
def media_root(tmp_path, settings):
    """A MEDIA_ROOT of the test's own (worker subprocesses get it through the settings they copy)."""
    root = tmp_path / "media"
    root.mkdir()
    settings.MEDIA_ROOT = root
    return root


@pytest.fixture(autouse=True)
def _language_of_settings():
    """A request in another language activates it for the rest of the thread: undo that, so
    no test reads the language an earlier one left behind."""
    yield
    from django.utils import translation

    translation.deactivate()


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """Hashing a password costs about a second by design; tests need none of that strength."""
    from django.conf import settings as django_settings

    django_settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
