"""The engine's statements outside a pipeline run on one cursor kept per connection
(jobs/engine/queries.py): what Django's cursor would do for them still happens."""

import threading

import pytest
from django.db import DataError, ProgrammingError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from jobs import services
from jobs.engine import queries
from jobs.models import Job

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def kept():
    return getattr(connection, "haulage_cursor", None)


def test_one_cursor_serves_every_enqueue_on_a_connection_and_a_new_connection_gets_its_own():
    services.enqueue("tests.noop", {})
    first = kept()
    assert first is not None and first.connection is connection.connection
    services.enqueue("tests.noop", {})
    assert kept() is first
    connection.close()
    services.enqueue("tests.noop", {})
    assert kept() is not first and kept().connection is connection.connection
    assert Job.objects.count() == 3


def test_each_thread_has_its_own_cursor():
    services.enqueue("tests.noop", {})
    mine, theirs = kept(), []

    def enqueue():
        try:
            services.enqueue("tests.noop", {})
            theirs.append(kept())
        finally:
            connection.close()

    thread = threading.Thread(target=enqueue)
    thread.start()
    thread.join()
    assert theirs and theirs[0] is not None and theirs[0] is not mine
    assert Job.objects.count() == 2


def test_what_watches_the_queries_sees_the_enqueue():
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        services.enqueue("tests.noop", {})
    assert any(sql.startswith("INSERT INTO jobs_job") and "pg_notify" in sql for sql in seen)
    with CaptureQueriesContext(connection) as captured:
        services.enqueue("tests.noop", {})
    assert any(q["sql"].startswith("INSERT INTO jobs_job") and "pg_notify" in q["sql"] for q in captured)
    assert Job.objects.count() == 2


def test_an_error_is_djangos_and_the_cursor_serves_the_next_statement():
    services.enqueue("tests.noop", {})  # the cursor exists
    with pytest.raises(DataError):
        queries._execute("SELECT 1 / 0")
    with pytest.raises(ProgrammingError):
        queries._execute("SELECT no_such_column FROM jobs_job")
    assert services.enqueue("tests.noop", {}).pk
    assert queries._execute("SELECT count(*) FROM jobs_job") == [(2,)]
    assert queries._execute("SET LOCAL lock_timeout = '1s'") is None  # no rows: None


def test_a_transaction_that_must_roll_back_runs_no_more_statements():
    """Django refuses a statement in a transaction marked for rollback, one that PostgreSQL
    itself would still run; the engine's statements are refused the same way."""
    with transaction.atomic():
        services.enqueue("tests.noop", {})
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            services.enqueue("tests.noop", {})
    assert not Job.objects.exists()
