"""What only PostgreSQL can show of the completions' statements: their plans, and one text."""

import os
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from jobs import services
from jobs.engine import claiming, queries
from jobs.models import Job, JobStatus, Worker
from tests.plans import prepared_plan

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def claimed(count, worker):
    services.enqueue_many([("tests.noop", {}, {}) for _ in range(count)])
    jobs = []
    while len(jobs) < count:
        jobs += claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=count)
    return jobs


STATEMENTS = {
    "one statement": lambda jobs: queries.complete_plain_statement(
        [(job.pk, job.lease_token, None, 0.001, 0) for job in jobs], minute=timezone.now(),
        event_kind="succeeded", event_data={"status": "SUCCESSFUL"}),
    "in a transaction": lambda jobs: queries.complete_batch_statement(
        [(job.pk, job.lease_token, None) for job in jobs]),
}


@pytest.mark.parametrize("way", STATEMENTS)
def test_a_completion_finds_its_rows_by_id_not_through_an_index_of_statuses(way):
    """The statistics say few jobs run (they were read when none did), while the running
    index holds an entry for every job claimed since. A plan that walks that index (a
    bitmap scan, which never clears a dead entry) costs more with every batch; the ids
    of the batch are the way in, on the custom plan and on the generic one."""
    worker = Worker.objects.create(name="w", host="h", pid=1)
    services.complete_many([(job, None) for job in claimed(400, worker)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    sql, params = STATEMENTS[way](claimed(8, worker))
    plans = [prepared_plan(sql, params, mode=mode)
             for mode in ("force_custom_plan", "force_generic_plan")]
    for plan in plans:
        assert "jobs_job_running" not in plan and "jobs_job_unique_live_key" not in plan, plan
        assert "Index Scan using jobs_job_pkey on jobs_job" in plan, plan


def test_batches_of_every_size_share_one_statement():
    """One text for every batch size: prepared once, not once per size."""
    worker = Worker.objects.create(name="w", host="h", pid=1)
    jobs = claimed(36, worker)
    done, first = set(), 0
    for size in range(1, 9):
        batch = jobs[first:first + size]
        first += size
        done |= queries.complete_plain(
            [(job.pk, job.lease_token, {"n": size}, 0.001, 0) for job in batch],
            minute=timezone.now(), event_kind="succeeded", event_data={"status": "SUCCESSFUL"})
    assert done == {job.pk for job in jobs}
    assert Job.objects.filter(status=JobStatus.SUCCESSFUL).count() == 36
    assert Job.objects.get(pk=jobs[-1].pk).result == {"n": 8}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                       ["%UPDATE jobs_job SET status = 'SUCCESSFUL'%"])
        [(prepared,)] = cursor.fetchall()
    if os.environ.get("DATABASE_POOLER") == "transaction":
        assert prepared == 0  # nothing is prepared through the pool
    else:
        assert prepared == 1


def test_a_row_whose_lease_moved_on_is_left_alone():
    worker = Worker.objects.create(name="w", host="h", pid=1)
    kept, lost = claimed(2, worker)
    done = queries.complete_plain(
        [(kept.pk, kept.lease_token, None, 0.001, 0), (lost.pk, uuid.uuid4(), None, 0.001, 0)],
        minute=timezone.now(), event_kind="succeeded", event_data={"status": "SUCCESSFUL"})
    assert done == {kept.pk}
    assert Job.objects.get(pk=lost.pk).status == JobStatus.RUNNING
