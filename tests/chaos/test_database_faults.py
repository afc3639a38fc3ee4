"""The small tier on PostgreSQL: the database restarted, sessions killed, the network misbehaving."""

import os
import subprocess
import sys
import time

import pytest
from django.db import DatabaseError, connection

from jobs import services
from jobs.models import Job
from tests.chaos import scenarios
from tests.chaos.checker import ENQUEUE_HANG_S, GuaranteeBroken
from tests.chaos.harness import ROOT, Load, durable_commits, postgres_url
from tests.chaos.proxy import Proxy
from tests.servers import database_url

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.postgres]

SMALL = {"workers": 3, "concurrency": 4, "duration_s": 8}


def test_a_postgresql_restart_loses_no_job_and_no_acknowledged_enqueue(chaos, pg_server):
    report = chaos(scenarios.PostgresRestart(outage_s=3), load=Load(jobs=120), **SMALL)
    assert report.faults["pg_restart"] >= 1, report.describe()
    assert report.enqueue_refused >= 1, report.describe()  # it really was down for a while
    report.require_ok()


def test_terminated_worker_sessions_lose_nothing(chaos):
    report = chaos(scenarios.get("terminate_sessions"), load=Load(jobs=120), **SMALL)
    assert report.faults["terminate_sessions"] >= 2, report.describe()
    report.require_ok()


def test_replies_lost_on_the_way_back_lose_nothing(chaos):
    report = chaos(scenarios.get("lost_replies"), load=Load(jobs=120), **SMALL)
    assert report.faults["drop_replies"] >= 1, report.describe()
    report.require_ok()


def test_a_partitioned_worker_loses_nothing_whether_the_partition_ends_in_a_reset_or_not(chaos):
    report = chaos(scenarios.get("partition"), load=Load(jobs=120), **SMALL)
    assert report.faults["partition"] >= 1, report.describe()
    report.require_ok()


# A pause at the worst moment: see docs/reliability.md, "Found and fixed, and what is left".
FROZEN_IN_TRANSACTION = (
    "A worker frozen (SIGSTOP, a VM pause, a partition) between two statements of a "
    "claim or completion keeps its session idle in transaction, holding the row locks of "
    "the concurrency keys it touched. Until it wakes, every enqueue of a job with such a "
    "key waits (no answer for the whole pause) and no other worker can claim or rescue "
    "jobs of that key, so its own jobs run again only when it wakes, not within "
    "lease + rescue + poll. Nothing bounds the wait: PostgreSQL keeps the session until "
    "its TCP keepalive gives up (hours by default)."
)


def test_a_worker_frozen_inside_a_transaction_holds_up_no_enqueue_and_no_recovery(chaos):
    # FROZEN_IN_TRANSACTION is what happened before the settings ended such
    # sessions after half a lease (project/settings.py); this holds it.
    report = chaos(scenarios.get("stop_in_transaction"), load=Load(jobs=300), workers=3,
                   concurrency=4, duration_s=10)
    assert report.faults["stop_in_transaction"] >= 1, report.describe()
    report.require_ok()


def test_with_an_idle_in_transaction_timeout_a_frozen_worker_holds_up_nothing(chaos):
    # The remedy for the gap above, as a worker setting: PostgreSQL ends a
    # session idle in a transaction for 2 s (well inside the 3 s lease),
    # releasing its locks; the frozen worker finds its session gone on waking.
    report = chaos(scenarios.get("stop_in_transaction"), load=Load(jobs=300), workers=3,
                   concurrency=4, duration_s=10,
                   worker_db_options={"options": "-c idle_in_transaction_session_timeout=2000"})
    assert report.faults["stop_in_transaction"] >= 1, report.describe()
    report.require_ok()


# --- Enqueue during an outage, at the services.enqueue level ------------------------


def test_enqueue_during_an_outage_answers_an_error_and_keeps_what_it_acknowledged(
        transactional_db, pg_server):
    from tests.chaos import kinds

    kinds.register()
    durable_commits(True)
    try:
        acknowledged = [services.enqueue(kinds.INLINE, {"n": n}).pk for n in range(5)]
        connection.close()
        pg_server.stop("immediate")
        try:
            for n in range(3):
                began = time.monotonic()
                with pytest.raises(DatabaseError):
                    services.enqueue(kinds.INLINE, {"n": 100 + n})
                assert time.monotonic() - began < ENQUEUE_HANG_S
        finally:
            pg_server.start()
        connection.close()
        assert set(Job.objects.filter(pk__in=acknowledged).values_list("pk", flat=True)) == set(
            acknowledged)
        assert services.enqueue(kinds.INLINE, {"n": 200}).pk  # and it answers again
    finally:
        durable_commits(False)
        kinds.unregister()


ENQUEUE_ONCE = """
import time
import django
django.setup()
from django.db import DatabaseError
from jobs import services
began = time.monotonic()
try:
    services.enqueue("chaos.inline", {"n": 1})
    print("acknowledged", time.monotonic() - began)
except DatabaseError as exc:
    print("refused", time.monotonic() - began, type(exc).__name__)
"""


def enqueue_through(url):
    """Enqueue once from a fresh process on `url`: ("acknowledged"|"refused"|"no answer", seconds)."""
    env = {**os.environ, "DATABASE_URL": url, "JOBS_HANDLER_MODULES": "tests.chaos.kinds"}
    # The process needs a moment to start Django before it enqueues.
    try:
        done = subprocess.run([sys.executable, "-c", ENQUEUE_ONCE], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=ENQUEUE_HANG_S + 8)
    except subprocess.TimeoutExpired:
        return "no answer", None
    words = done.stdout.split()
    if len(words) < 2:
        return "crashed", done.stderr[-500:]
    return words[0], float(words[1])


@pytest.fixture
def partitioned(transactional_db):
    """A proxy to the test database that holds every connection (a network partition)."""
    proxy = Proxy((connection.settings_dict["HOST"], int(connection.settings_dict["PORT"]))).start()
    proxy.partition()
    yield proxy
    proxy.heal(reset=True)
    proxy.close()


def test_enqueue_across_a_partition_answers_an_error_instead_of_hanging(partitioned):
    # Without a connect_timeout (the settings now add one) this waited forever.
    answer, seconds = enqueue_through(postgres_url(database_url(connection), proxy=partitioned))
    assert answer != "crashed", seconds
    if answer != "refused" or seconds >= ENQUEUE_HANG_S:
        raise GuaranteeBroken(f"enqueue across a partition: {answer} after {seconds} s")


def test_with_a_connect_timeout_an_enqueue_across_a_partition_answers_an_error(partitioned):
    url = postgres_url(database_url(connection), proxy=partitioned, connect_timeout=2)
    answer, seconds = enqueue_through(url)
    assert answer == "refused", (answer, seconds)
    assert seconds < ENQUEUE_HANG_S
