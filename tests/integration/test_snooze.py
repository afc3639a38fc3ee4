"""Snooze: "not now, come back in N seconds", without spending an attempt."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.exceptions import Snooze
from jobs.models import Job, JobEvent, JobStatus, Outcome
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_snooze_spends_no_attempt_and_waits_its_delay(run_worker):
    job = services.enqueue("tests.snooze", {"seconds": 3600})
    before = timezone.now()
    run_worker()
    job.refresh_from_db()
    # READY again an hour on, with the attempt given back: max_attempts is 1.
    assert (job.status, job.attempts, job.snoozes, job.error_code) == (JobStatus.READY, 0, 1, "snoozed")
    assert job.run_after >= before + timedelta(seconds=3599)
    event = JobEvent.objects.get(job=job, kind=Outcome.SNOOZED)
    assert event.reason == "not yet" and event.data["seconds"] == 3600

    # Not before its time: a burst worker leaves it alone...
    run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    # ...and once due it runs on its one attempt.
    # (A second ago: SQLite's clock has whole milliseconds, see test_insights.)
    Job.objects.filter(pk=job.pk).update(run_after=timezone.now() - timedelta(seconds=1))
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SUCCESSFUL, 1)
    assert job.result == {"attempt": 1, "snoozes": 1}


def test_snoozing_more_than_the_cap_fails_the_job(run_worker, settings):
    settings.JOBS_MAX_SNOOZES = 2
    job = services.enqueue("tests.snooze", {"seconds": 0, "times": 99})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.error_code, job.snoozes, job.attempts) == (
        JobStatus.FAILED, "snoozed_too_often", 2, 1)
    assert JobEvent.objects.filter(job=job, kind=Outcome.SNOOZED).count() == 2


def test_a_snooze_past_the_longest_is_cut_to_it(run_worker, settings):
    settings.JOBS_SNOOZE_MAX_SECONDS = 600
    job = services.enqueue("tests.snooze", {"seconds": 10**12})
    before = timezone.now()
    run_worker()
    job.refresh_from_db()
    assert job.status == JobStatus.READY
    assert before + timedelta(seconds=590) <= job.run_after <= timezone.now() + timedelta(seconds=610)


@pytest.mark.parametrize("seconds", ["nan", "-1", "inf", 10**400],
                         ids=["nan", "negative", "infinite", "past-float"])
def test_a_bad_snooze_fails_the_attempt_with_a_clear_error_and_the_worker_carries_on(run_worker,
                                                                                     seconds):
    job = services.enqueue("tests.snooze", {"seconds": seconds})
    after = services.enqueue("tests.echo", {})
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.snoozes) == (JobStatus.FAILED, 0)
    assert job.error.startswith("ValueError: A snooze takes")
    assert Job.objects.get(pk=after.pk).status == JobStatus.SUCCESSFUL


@pytest.mark.parametrize("seconds", [-0.5, float("nan"), float("inf"), "10", None, True])
def test_snooze_refuses_what_is_not_a_finite_number_of_seconds(seconds):
    with pytest.raises(ValueError, match="A snooze takes"):
        Snooze(seconds)


def test_a_django_task_may_snooze(run_worker):
    result = tasks.snooze_for.enqueue(120)
    run_worker()
    job = Job.objects.get(public_id=result.id)
    assert (job.status, job.attempts, job.snoozes) == (JobStatus.READY, 0, 1)
    assert job.run_after > timezone.now() + timedelta(seconds=100)


def test_a_manual_retry_forgets_the_snoozes(run_worker, settings):
    settings.JOBS_MAX_SNOOZES = 0
    job = services.enqueue("tests.snooze", {"seconds": 0})
    run_worker()
    assert Job.objects.get(pk=job.pk).error_code == "snoozed_too_often"
    settings.JOBS_MAX_SNOOZES = 1
    Job.objects.filter(pk=job.pk).update(snoozes=1)
    services.retry(job)
    assert Job.objects.get(pk=job.pk).snoozes == 0
    run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCESSFUL
