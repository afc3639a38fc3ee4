"""What only PostgreSQL can show: row locks skipped, and the claim's plan."""

import os
import threading
import time
import uuid

import pytest
from django.db import NotSupportedError, connection, transaction
from django.test.utils import CaptureQueriesContext

from jobs import services
from jobs.engine import claiming, queries
from jobs.models import Job, JobStatus, Worker
from tests.connections import other_connection
from tests.plans import prepared_plan
from tests.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_row_locked_by_another_connection_is_skipped():
    first = services.enqueue("tests.noop", {})
    second = services.enqueue("tests.noop", {})
    worker = Worker.objects.create(name="w", host="h", pid=1)
    with other_connection() as conn:
        conn.execute("SELECT id FROM jobs_job WHERE id = %s FOR UPDATE", [first.pk])
        claimed = claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=2)
        assert [j.pk for j in claimed] == [second.pk]
        conn.rollback()
    claimed = claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=2)
    assert [j.pk for j in claimed] == [first.pk]


def test_claimers_that_queued_for_a_queues_lock_count_what_the_first_one_started():
    """The claim sends its queue lock, the count of the queue's RUNNING jobs and its
    candidates in one round trip; the count still runs after the lock is granted, so of
    two claimers that waited for it the second counts the first one's starts."""
    services.set_queue("default", concurrency=2)
    services.enqueue_many([("tests.noop", {}, {}) for _ in range(6)])
    workers = [Worker.objects.create(name=name, host="h", pid=1) for name in "ab"]
    got = []

    def claimer(worker):
        try:
            got.extend(claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=3))
        finally:
            connection.close()

    waiting = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
               "AND query LIKE '%jobs_queue%'")
    with other_connection() as conn, other_connection() as watcher:
        watcher.autocommit = True
        conn.execute("SELECT name FROM jobs_queue WHERE name = 'default' FOR UPDATE")
        threads = [threading.Thread(target=claimer, args=(w,)) for w in workers]
        for thread in threads:
            thread.start()
        wait_for(lambda: watcher.execute(waiting).fetchone()[0] == 2, timeout=10)
        conn.rollback()
    for thread in threads:
        thread.join()
    assert len(got) == 2
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 2


def test_burst_exits_past_a_ready_row_another_transaction_holds_locked(run_worker):
    held = services.enqueue("tests.noop", {})
    free = services.enqueue("tests.noop", {})
    with other_connection() as conn:
        # Held for as long as the test needs: the server would otherwise end
        # this idle transaction (and free the row) after half a lease.
        conn.execute("SET idle_in_transaction_session_timeout = 0")
        conn.execute("SELECT id FROM jobs_job WHERE id = %s FOR UPDATE", [held.pk])
        # Fails with "did not finish in time" if the worker waits for the lock.
        run_worker(kinds=["tests.noop"])
        conn.rollback()
    assert Job.objects.get(pk=free.pk).status == JobStatus.SUCCESSFUL
    assert Job.objects.get(pk=held.pk).status == JobStatus.READY  # left for a worker that can take it


def test_the_claim_uses_the_partial_index_with_many_rows():
    services.enqueue_many([("tests.noop", {}, {}) for _ in range(5000)])
    Job.objects.filter(pk__in=Job.objects.order_by("pk").values("pk")[:2000]).update(status="SUCCESSFUL")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    query = claiming.candidates_query("default", ["tests.noop"])[:8]
    with transaction.atomic(), connection.cursor() as cursor:
        sql, params = query.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "jobs_job_claimable" in plan, plan
    assert "Sort" not in plan, plan


def test_the_one_statement_claim_walks_the_claim_index_of_every_queue_it_looks_at():
    """Jobs without keys are claimed in one statement, which also looks for work in the
    queues it leaves to the checked claim: each look must be a walk of the claim index,
    not a scan of the table (which made every claim cost tens of milliseconds with a
    deep backlog in another queue)."""
    services.enqueue_many([("tests.noop", {}, {}) for _ in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    worker = Worker.objects.create(name="w", host="h", pid=1)
    sql, params = queries.claim_plain_statement(
        {"other": 10}, ["tests.noop", "tests.other_queue"], 10, elsewhere=["gapped", "default"],
        worker=worker, token=uuid.uuid4(), lease_s=30)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)  # not run: EXPLAIN alone changes nothing
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on jobs_job" not in plan, plan
    assert plan.count("jobs_job_claimable") == 2, plan


def test_the_one_statement_claims_generic_plan_walks_the_claim_index_of_every_queue():
    """The claim runs on its generic plan, made once without its parameters' values: that
    plan too must walk the claim index, not sort the backlog (a generic plan that did not
    know the per-queue LIMIT ran for minutes at a million READY rows)."""
    services.enqueue_many([("tests.noop", {}, {}) for _ in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    worker = Worker.objects.create(name="w", host="h", pid=1)
    sql, params = queries.claim_plain_statement(
        {"default": 20, "other": 3}, ["tests.noop", "tests.other_queue"], 20,
        elsewhere=["gapped"], worker=worker, token=uuid.uuid4(), lease_s=30)
    plan = prepared_plan(sql, params, mode="force_generic_plan")
    assert "$1" in plan, plan  # the generic plan: its parameters are not known in it
    assert "Seq Scan on jobs_job" not in plan, plan
    assert plan.count("jobs_job_claimable") == 2, plan


def test_the_one_statement_claim_runs_on_its_generic_plan_and_the_setting_goes_with_it():
    """Its custom plan, made again at every call, cost as much as the claim itself; the
    setting that picks the generic plan lasts the claim's own transaction and no longer."""
    worker = Worker.objects.create(name="w", host="h", pid=1)

    def plan_cache_mode():
        with connection.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            return cursor.fetchone()[0]

    for _ in range(8):  # past psycopg's prepare_threshold
        job = services.enqueue("tests.noop", {})
        [claimed] = claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=20)
        assert claimed.pk == job.pk
        assert plan_cache_mode() == "auto"
    with transaction.atomic():
        # Inside a caller's transaction the setting would outlive the claim: not set there.
        job = services.enqueue("tests.noop", {})
        [claimed] = claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=20)
        assert claimed.pk == job.pk
        assert plan_cache_mode() == "auto"
    with connection.cursor() as cursor:
        cursor.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                       "WHERE statement LIKE %s", ["%WITH candidate AS%"])
        plans = cursor.fetchall()
    if os.environ.get("DATABASE_POOLER") == "transaction":
        assert plans == []  # nothing is prepared through the pool
        return
    [(generic, custom)] = plans
    assert generic >= 3
    assert custom == 1  # the one claim inside the caller's transaction


def test_after_meeting_a_job_with_a_key_first_the_claim_skips_its_one_statement_for_a_moment(
        monkeypatch):
    """Queues whose first job carries a key leave the one-statement claim nothing to take;
    for a moment after such a miss claims go straight to the checked claim."""
    monkeypatch.setattr(claiming, "PLAIN_MISS_PAUSE_S", 0.2)
    keyed = [services.enqueue("tests.limited", {"keys": [f"user:{i}"]}) for i in range(3)]
    worker = Worker.objects.create(name="w", host="h", pid=1)

    def claim_and_see():
        with CaptureQueriesContext(connection) as seen:
            [job] = claiming.claim(worker, queues=["default"], kinds=["tests.limited"], limit=1)
        return job.pk, any("WITH candidate AS" in q["sql"] for q in seen.captured_queries)

    assert claim_and_see() == (keyed[0].pk, True)  # tried, took nothing, then the checked claim
    assert claim_and_see() == (keyed[1].pk, False)
    time.sleep(0.3)
    assert claim_and_see() == (keyed[2].pk, True)


def prepared_statements():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_the_engines_statements_are_prepared_and_djangos_own_queries_are_not():
    """Connected directly; behind a transaction pooler (the PgBouncer pass) nothing is, since
    the server connection that held a prepared statement serves other clients next."""
    worker = Worker.objects.create(name="w", host="h", pid=1)
    for _ in range(6):  # psycopg prepares a statement on its fifth run on a connection
        services.enqueue("tests.noop", {})
        claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=1)
        Job.objects.filter(kind="tests.nothing").count()
    prepared = prepared_statements()
    if os.environ.get("DATABASE_POOLER") == "transaction":
        assert prepared == []
        return
    assert any(s.startswith("INSERT INTO jobs_job") and "pg_notify" in s for s in prepared)  # enqueue
    assert any("UPDATE jobs_job SET" in s for s in prepared)  # the claim
    assert not any("tests.nothing" in s or "COUNT(*)" in s for s in prepared)


def test_a_migration_that_changes_a_returned_column_stalls_no_claim_and_no_enqueue():
    """The engine's statements are prepared on each connection. PostgreSQL refuses a
    prepared statement for good once a column it returns changes type ("cached plan must
    not change result type"), so the connection that held it is dropped: the statement
    that met it fails once, the next one runs on a fresh connection."""
    worker = Worker.objects.create(name="w", host="h", pid=1)

    def claim():
        return [j.pk for j in claiming.claim(worker, queues=["default"], kinds=["tests.noop"],
                                             limit=10)]

    for _ in range(8):  # past psycopg's prepare_threshold: the enqueue and the claim prepared
        job = services.enqueue("tests.noop", {})
        assert claim() == [job.pk]
    with other_connection() as conn:
        conn.execute("ALTER TABLE jobs_job ALTER COLUMN kind TYPE text")
        conn.commit()
    try:
        # The enqueue returns only the new id, whose type did not change.
        queued = [services.enqueue("tests.noop", {}).pk for _ in range(3)]
        claimed, refused = [], 0
        for _ in range(3):
            try:
                claimed += claim()
            except NotSupportedError:
                refused += 1
        assert sorted(claimed) == queued
        assert refused <= 1
    finally:
        connection.close()
        with other_connection() as conn:
            max_length = Job._meta.get_field("kind").max_length
            conn.execute(f"ALTER TABLE jobs_job ALTER COLUMN kind TYPE varchar({max_length})")
            conn.commit()
