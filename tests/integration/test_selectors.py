"""Where a job stands, answered from the claim's own order."""

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import services
from jobs.engine import claiming, order
from jobs.models import Job, JobStatus, Worker
from jobs.selectors import standing as selectors

pytestmark = pytest.mark.django_db


def live_worker(kinds=("tests.noop", "tests.limited", "tests.echo")):
    return Worker.objects.create(name="w", host="h", pid=1, kinds=list(kinds))


def test_position_counts_the_jobs_ahead():
    live_worker()
    jobs = [services.enqueue("tests.noop", {}) for _ in range(3)]
    urgent = services.enqueue("tests.noop", {}, priority=10)
    assert selectors.standing(urgent).position == 1
    assert [selectors.standing(j).position for j in jobs] == [2, 3, 4]
    assert selectors.standing(jobs[2]).message == "3 job(s) ahead of it."


def test_reasons_for_waiting():
    job = services.enqueue("tests.noop", {})
    assert selectors.standing(job).reason == "no_worker"
    live_worker()
    assert selectors.standing(job).reason == "queued"
    services.set_queue("default", paused=True)
    assert selectors.standing(job).reason == "queue_paused"
    services.set_queue("default", paused=False)
    later = services.enqueue("tests.noop", {}, run_after=timezone.now() + timezone.timedelta(minutes=5))
    assert selectors.standing(later).reason == "scheduled"


def test_a_busy_key_is_named_in_words_the_app_chose():
    selectors.describe_key("user", "Your other jobs are running.")
    worker = live_worker()
    services.enqueue("tests.limited", {"keys": ["user:1"]})
    second = services.enqueue("tests.limited", {"keys": ["user:1"]})
    claiming.claim(worker, queues=["default"], kinds=["tests.limited"], limit=1)
    standing = selectors.standing(Job.objects.get(pk=second.pk))
    assert (standing.reason, standing.key, standing.message) == (
        "key_busy", "user:1", "Your other jobs are running.")


def test_a_queue_at_its_global_limit_says_so():
    worker = live_worker()
    services.set_queue("default", concurrency=1)
    services.enqueue("tests.noop", {})
    waiting = services.enqueue("tests.noop", {})
    claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=5)
    assert selectors.standing(waiting).reason == "queue_full"


def test_reading_standing_writes_nothing(django_assert_num_queries):
    live_worker()
    job = services.enqueue("tests.noop", {})
    before = Job.objects.values_list("updated_at", flat=True).get(pk=job.pk)
    for _ in range(20):
        selectors.standing(job)
    assert Job.objects.values_list("updated_at", flat=True).get(pk=job.pk) == before


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-2, 2)), min_size=1, max_size=12))
def test_up_next_order_equals_claim_order(specs):
    Job.objects.all().delete()
    worker = Worker.objects.create(name="p", host="h", pid=1)
    for priority, position in specs:
        job = services.enqueue("tests.noop", {}, priority=priority)
        Job.objects.filter(pk=job.pk).update(position=position)
    shown = [j.pk for j in order.ready_in_order("default", limit=100)]
    claimed = []
    while batch := claiming.claim(worker, queues=["default"], kinds=["tests.noop"], limit=1):
        claimed.extend(j.pk for j in batch)
    assert shown == claimed
    assert len(claimed) == len(specs)


@pytest.fixture
def cooling():
    """Registers `tests.cooling` (one job at a time, two attempts) with the cool-down asked for."""
    from jobs.engine import registry

    def register(cooldown_s):
        registry.register("tests.cooling", lambda ctx, payload: None, cooldown_s=cooldown_s,
                          max_attempts=2, unique_key=lambda payload, owner: "cooling")

    yield register
    registry.unregister("tests.cooling")


def test_cooldown_rearms_a_failed_job_asked_for_again_with_attempts_reset(cooling):
    from jobs.runtime.worker import Worker as Reaper

    cooling(60)
    job = services.enqueue("tests.cooling", {})
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, attempts=2,
                                         finished_at=timezone.now() - timezone.timedelta(seconds=30))
    # Before the cool-down, asking again returns the failed job as it is.
    assert services.enqueue("tests.cooling", {}).status == JobStatus.FAILED
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timezone.timedelta(seconds=61))
    # The reaper re-arms nothing: only a request does.
    Reaper().reap()
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    again = services.enqueue("tests.cooling", {}, priority=5)
    assert again.pk == job.pk
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.priority) == (JobStatus.READY, 0, 5)
    assert Job.objects.count() == 1


def test_staff_retry_of_failed_jobs_skips_the_cooldown(cooling):
    cooling(3600)
    job = services.enqueue("tests.cooling", {})
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, attempts=2,
                                         finished_at=timezone.now())
    assert services.retry_matching(Job.objects.all()) == (1, 0)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.READY, 0)
