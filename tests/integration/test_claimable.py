"""Which READY jobs a worker may take is declared once, in jobs/models.py (CLAIMABLE, and
PARKED beside it), and spelled once in SQL (jobs/engine/queries.py CLAIMABLE_SQL): the two
spellings, and the partial indexes the claim walks, must name one and the same set of rows."""

import itertools

import pytest
from django.db import connection

from jobs.engine import limits, queries
from jobs.models import CLAIMABLE, PARKED, Job, JobStatus

pytestmark = pytest.mark.django_db

# No block, and one of each kind of block: a full concurrency key, a rate
# window, unfinished parents; "" is not NULL, so it parks as much as any key.
BLOCKED_KEYS = (None, "", "user:1", limits.RATE_PREFIX + "site", limits.PARENTS)


@pytest.fixture
def every_state():
    """{(status, blocked_key): job id} for every status crossed with every blocked key."""
    jobs = [Job(kind="tests.noop", status=status, blocked_key=key)
            for status, key in itertools.product(JobStatus.values, BLOCKED_KEYS)]
    Job.objects.bulk_create(jobs)
    return {(job.status, job.blocked_key): job.pk
            for job in Job.objects.only("status", "blocked_key")}


def ids_where(sql):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM jobs_job WHERE {sql}")
        return {pk for (pk,) in cursor.fetchall()}


def test_the_sql_and_the_orm_spelling_pick_the_same_rows(every_state):
    assert len(every_state) == len(JobStatus.values) * len(BLOCKED_KEYS)
    by_orm = set(Job.objects.filter(CLAIMABLE).values_list("pk", flat=True))
    assert ids_where(queries.CLAIMABLE_SQL) == by_orm
    assert ids_where(f"NOT ({queries.CLAIMABLE_SQL})") == set(every_state.values()) - by_orm


def test_claimable_is_exactly_the_ready_jobs_without_a_block(every_state):
    claimable = set(Job.objects.filter(CLAIMABLE).values_list("pk", flat=True))
    assert claimable == {every_state[(JobStatus.READY, None)]}


def test_every_ready_job_is_either_claimable_or_parked(every_state):
    parked = set(Job.objects.filter(PARKED).values_list("pk", flat=True))
    assert parked == {pk for (status, key), pk in every_state.items()
                      if status == JobStatus.READY and key is not None}
    assert not Job.objects.filter(CLAIMABLE).filter(PARKED).exists()
    ready = set(Job.objects.filter(status=JobStatus.READY).values_list("pk", flat=True))
    assert set(Job.objects.filter(CLAIMABLE | PARKED).values_list("pk", flat=True)) == ready


def test_the_partial_indexes_are_declared_on_the_same_conditions():
    conditions = {index.name: index.condition for index in Job._meta.indexes}
    assert conditions["jobs_job_claimable"] == CLAIMABLE
    assert conditions["jobs_job_waiting"] == CLAIMABLE
    assert conditions["jobs_job_blocked"] == PARKED
    assert CLAIMABLE != PARKED
