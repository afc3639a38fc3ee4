"""Each wait for PostgreSQL's reply to a statement made inside `dbwait.spinning()` looks at the
socket before it sleeps (jobs/engine/dbwait.py): the replies are the same, a slow server is
left to psycopg's waiting, a connection whose replies keep coming late stops spinning for a
while, and every other statement on the same connections waits exactly as psycopg does."""

import asyncio
import gc
import threading
import weakref

import pytest
from django.db import OperationalError, connection, transaction
from django.test import override_settings
from psycopg import generators, waiting

from jobs import services
from jobs.engine import dbwait, queries
from jobs.models import Job
from tests.connections import other_connection

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LONG_SPIN_US = 500_000  # any reply on loopback comes sooner


@pytest.fixture
def sleeps(monkeypatch):
    """Every wait that reached psycopg's own waiting still unanswered (each may sleep)."""
    seen = []
    real = waiting.wait

    def watched(gen):
        try:
            state = next(gen)
            while True:
                seen.append(state)
                state = gen.send((yield state))
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(waiting, "wait", lambda gen, *a, **kw: real(watched(gen), *a, **kw))
    return seen


@pytest.fixture
def spun(monkeypatch):
    """Every operation a spinner took over (one per statement, commit...)."""
    seen = []
    real = dbwait._Spinner.wrap

    def recorded(self, gen, fileno):
        seen.append(self)
        return real(self, gen, fileno)

    monkeypatch.setattr(dbwait._Spinner, "wrap", recorded)
    return seen


@pytest.fixture
def spinning_conn():
    """A connection of its own with the spin installed, long enough to answer any reply."""
    with other_connection(autocommit=True) as conn:
        dbwait.install(conn, LONG_SPIN_US)
        yield conn


def spins(conn, sleeps, spun):
    """Whether a statement on `conn` made here spins: the spinner takes it over and every
    reply comes within the spin; if not, psycopg's own waiting gets it untouched."""
    sleeps.clear()
    spun.clear()
    assert conn.execute("SELECT 6 * 7").fetchone() == (42,)
    if spun:
        assert sleeps == [], "a long spin answers every wait of a statement on loopback"
        return True
    assert sleeps, "a statement that does not spin waits in psycopg at least once for its reply"
    return False


def test_a_reply_within_the_spin_never_reaches_psycopgs_sleep(sleeps):
    with other_connection(autocommit=True) as conn:
        conn.execute("SELECT 1")
        assert sleeps, "without the spin, a statement waits in psycopg"
        dbwait.install(conn, LONG_SPIN_US)
        sleeps.clear()
        with dbwait.spinning():
            results = [conn.execute("SELECT %s::int * 2", [n]).fetchone()[0] for n in range(20)]
        assert results == [n * 2 for n in range(20)]
        assert sleeps == []


def test_a_wait_the_spin_cannot_answer_is_handed_on_and_ends_the_same():
    with other_connection(autocommit=True) as conn:
        fileno = conn.pgconn.socket
        conn.pgconn.send_query(b"SELECT 'spun'")
        conn.pgconn.flush()
        answered = dbwait._Spinner(LONG_SPIN_US / 1e6).answer(generators.fetch_many(conn.pgconn), fileno)
        with pytest.raises(StopIteration) as stop:
            next(answered)
        assert stop.value.value[0].get_value(0, 0) == b"spun"

        conn.pgconn.send_query(b"SELECT pg_sleep(0.05), 'slept'")
        conn.pgconn.flush()
        handed_on = dbwait._Spinner(0.0001).answer(generators.fetch_many(conn.pgconn), fileno)
        assert next(handed_on) == waiting.WAIT_R
        assert waiting.wait(handed_on, fileno)[0].get_value(0, 1) == b"slept"


@dbwait.spinning
def test_a_run_of_late_replies_rests_the_spin_and_a_timely_one_ends_the_run():
    with other_connection(autocommit=True) as conn:
        dbwait.install(conn, 200)
        spinner = conn.wait.spinner
        for _ in range(dbwait.MISSES_BEFORE_REST - 1):
            assert conn.execute("SELECT pg_sleep(0.01), 7").fetchone()[1] == 7
        assert spinner.misses == dbwait.MISSES_BEFORE_REST - 1 and not spinner.resting
        conn.execute("SELECT pg_sleep(0.01)")
        assert spinner.resting == dbwait.REST_OPERATIONS and spinner.misses == 0
        conn.execute("SELECT 1")
        assert spinner.resting == dbwait.REST_OPERATIONS - 1, "a resting connection sleeps at once"

        spinner.resting, spinner.spin_s, spinner.misses = 0, LONG_SPIN_US / 1e6, 3
        conn.execute("SELECT 1")
        assert spinner.misses == 0


def test_djangos_connections_spin_by_the_setting_and_not_when_it_is_0():
    connection.close()
    connection.ensure_connection()
    assert connection.connection.wait.spinner.spin_s == 200e-6
    with override_settings(JOBS_DB_SPIN_MICROSECONDS=0):
        connection.close()
        connection.ensure_connection()
        assert "wait" not in vars(connection.connection)
    connection.close()


def test_the_engines_statements_behave_the_same_through_the_spin(sleeps):
    """Autocommit, a transaction, a pipeline, COPY and an error, on a connection that spins."""
    connection.close()
    with override_settings(JOBS_DB_SPIN_MICROSECONDS=LONG_SPIN_US), dbwait.spinning():
        connection.ensure_connection()
        sleeps.clear()
        job = services.enqueue("tests.noop", {"n": 1})
        with transaction.atomic():
            services.enqueue("tests.noop", {"n": 2})
        services.enqueue_many([("tests.noop", {"n": n}, {}) for n in range(3, 53)])
        with queries.together():
            pending = queries.Pending("SELECT count(*) FROM jobs_job")
        assert pending.rows() == [(52,)]
        assert Job.objects.get(pk=job.pk).payload == {"n": 1}
        with pytest.raises(Exception, match="division by zero"), transaction.atomic():
            queries._execute("SELECT 1 / 0")
        assert Job.objects.count() == 52
        assert sleeps == [], "every reply came within the spin"
    connection.close()


def test_a_connection_killed_during_a_wait_is_an_error_not_a_hang():
    connection.close()
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with other_connection(autocommit=True) as killer:
        kill = threading.Timer(0.3, killer.execute, ["SELECT pg_terminate_backend(%s)", [pid]])
        kill.start()
        try:
            with pytest.raises(OperationalError), dbwait.spinning(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(30)")
        finally:
            kill.join()
    connection.close()


def test_the_spin_keeps_no_connection_alive():
    conn = other_connection(autocommit=True)
    dbwait.install(conn, 200)
    with dbwait.spinning():
        conn.execute("SELECT 1")
    conn.close()
    ref = weakref.ref(conn)
    del conn
    gc.collect()
    assert ref() is None


def test_a_process_that_stops_spinning_waits_in_psycopg_on_open_and_new_connections(sleeps):
    connection.close()
    connection.ensure_connection()
    assert "wait" in vars(connection.connection)
    dbwait.stop_spinning()
    assert "wait" not in vars(connection.connection)
    sleeps.clear()
    with dbwait.spinning():
        connection.cursor().execute("SELECT 1")
    assert sleeps, "the statement waited in psycopg"
    connection.close()
    connection.ensure_connection()
    assert "wait" not in vars(connection.connection)
    connection.close()


def test_a_statement_outside_spinning_is_handed_to_psycopgs_wait_untouched(sleeps, spun):
    with other_connection(autocommit=True) as conn:
        dbwait.install(conn, 200)
        spinner = conn.wait.spinner
        for _ in range(dbwait.MISSES_BEFORE_REST + 2):
            assert conn.execute("SELECT pg_sleep(0.01), 7").fetchone()[1] == 7
        assert spun == [] and sleeps, "no spinner took a statement over: psycopg waited for each"
        assert (spinner.misses, spinner.resting) == (0, 0), "late replies outside count for nothing"

        with dbwait.spinning():
            conn.execute("SELECT pg_sleep(0.01)")
        assert spun == [spinner] and spinner.misses == 1


def test_djangos_own_connection_spins_only_inside_spinning(sleeps, spun):
    connection.close()
    connection.ensure_connection()
    assert not spins(connection.connection, sleeps, spun), "the host project's queries"
    with dbwait.spinning():
        assert spins(connection.connection, sleeps, spun)
    assert not spins(connection.connection, sleeps, spun)
    connection.close()


def test_spinning_nests(spinning_conn, sleeps, spun):
    with dbwait.spinning():
        with dbwait.spinning():
            assert spins(spinning_conn, sleeps, spun)
        assert spins(spinning_conn, sleeps, spun), "the outer one still holds"
    assert not spins(spinning_conn, sleeps, spun)


@pytest.mark.parametrize("decorate", [dbwait.spinning, dbwait.spinning()], ids=["bare", "called"])
def test_a_decorated_function_spins_inside_and_not_after_it_returns_or_raises(
        decorate, spinning_conn, sleeps, spun):
    @decorate
    def engine_work(fail=False):
        """The engine's."""
        inside = spins(spinning_conn, sleeps, spun)
        if fail:
            raise RuntimeError("failed")
        return inside

    assert engine_work.__doc__ == "The engine's."
    assert engine_work() is True
    assert not spins(spinning_conn, sleeps, spun)
    with pytest.raises(RuntimeError):
        engine_work(fail=True)
    assert not spins(spinning_conn, sleeps, spun)


def test_one_threads_spinning_leaves_another_threads_statements_alone(spinning_conn, sleeps, spun):
    other_spun = []
    with dbwait.spinning():
        thread = threading.Thread(target=lambda: other_spun.append(spins(spinning_conn, sleeps, spun)))
        thread.start()
        thread.join()
        assert spins(spinning_conn, sleeps, spun)
    assert other_spun == [False]


def test_one_tasks_spinning_leaves_another_tasks_statements_alone(spinning_conn, sleeps, spun):
    inside, outside = asyncio.Event(), asyncio.Event()
    seen = {}

    async def engine():
        with dbwait.spinning():
            inside.set()
            await outside.wait()  # the other task runs its statement while this one is inside
            seen["engine"] = spins(spinning_conn, sleeps, spun)

    async def host():
        await inside.wait()
        seen["host"] = spins(spinning_conn, sleeps, spun)
        outside.set()

    async def both():
        await asyncio.gather(engine(), host())

    asyncio.run(both())
    assert seen == {"engine": True, "host": False}


def test_runworker_stops_spinning_before_it_starts_its_threads(monkeypatch):
    from django.core.management import call_command

    from jobs.management.commands import runworker

    order = []
    monkeypatch.setattr(dbwait, "stop_spinning", lambda: order.append("stopped spinning"))
    monkeypatch.setattr(runworker, "install_signal_handlers", lambda worker: None)
    monkeypatch.setattr(runworker.Worker, "run", lambda self: order.append("ran") and False)
    call_command("runworker", "--burst", "--no-scheduler")
    assert order == ["stopped spinning", "ran"]
