"""Behind PgBouncer in transaction pooling: the pass's own proof that it is there, and LISTEN
on a direct connection beside it (tests/runner.py's pgbouncer pass runs this file)."""

import os

import pytest
from django.db import connection
from django.test import override_settings

from jobs.engine import wakeup

pytestmark = pytest.mark.postgres


def pooled():
    return os.environ.get("DATABASE_POOLER") == "transaction"


def test_settings_behind_a_transaction_pooler_keep_no_session_state(db):
    if not pooled():
        pytest.skip("this pass connects to PostgreSQL directly")
    settings = connection.settings_dict
    assert settings["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert settings["OPTIONS"]["prepare_threshold"] is None
    # PgBouncer refuses startup options; the idle-in-transaction guard is its own setting.
    assert "options" not in settings["OPTIONS"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        [(server_port,)] = cursor.fetchall()
    # The server sees the pooler's connection, not ours: the ports differ.
    assert str(server_port) == os.environ["TEST_PG_PORT"] != str(settings["PORT"])


def test_listen_goes_straight_to_the_server_and_its_database(db):
    if not pooled():
        pytest.skip("this pass connects to PostgreSQL directly")
    params = wakeup.listen_params()
    assert str(params["port"]) == os.environ["TEST_PG_PORT"]
    assert params["dbname"] == connection.settings_dict["NAME"]


def test_without_a_direct_connection_workers_behind_a_pooler_poll(db):
    with override_settings(JOBS_DATABASE_POOLER="transaction", JOBS_LISTEN_DATABASE=None):
        assert wakeup.listen_params() is None
    with override_settings(JOBS_DATABASE_POOLER="", JOBS_LISTEN_DATABASE=None):
        assert wakeup.listen_params()["dbname"] == connection.settings_dict["NAME"]
