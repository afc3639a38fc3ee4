"""How an attempt ends: one rule (jobs/engine/outcome.py), one JobEvent and one log line per transition."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.engine import claiming, outcome
from jobs.maintenance import reaper
from jobs.models import Job, JobEvent, JobStatus, Outcome, Worker

pytestmark = pytest.mark.django_db


def running(kind="tests.sleep_for", **options):
    """A job of `kind` claimed by a worker: RUNNING under a lease, attempt 1."""
    job = services.enqueue(kind, {}, **options)
    worker = Worker.objects.create(name="w", host="h", pid=1)
    [claimed] = claiming.claim(worker, queues=[job.queue], kinds=[kind], limit=1)
    assert claimed.pk == job.pk
    return claimed


def history_of(caplog, job):
    return [r for r in caplog.records if r.name == "jobs.history" and r.job_id == job.pk]


# (outcome, kind, the event noted, the state the job goes to, its attempts after)
TABLE = [
    (Outcome.SUCCEEDED, "tests.sleep_for", "succeeded", JobStatus.SUCCESSFUL, 1),
    (Outcome.RETRY, "tests.sleep_for", "retry", JobStatus.READY, 1),
    (Outcome.RETRY, "tests.echo", "failed", JobStatus.FAILED, 1),  # max_attempts 1: spent
    (Outcome.SNOOZED, "tests.sleep_for", "snoozed", JobStatus.READY, 0),
    (Outcome.FAILED, "tests.sleep_for", "failed", JobStatus.FAILED, 1),
    (Outcome.CANCELLED, "tests.sleep_for", "cancelled", JobStatus.CANCELLED, 1),
    (Outcome.PAUSED, "tests.sleep_for", "paused", JobStatus.PAUSED, 0),
    (Outcome.REQUEUED, "tests.sleep_for", "requeued", JobStatus.READY, 0),
    (Outcome.TIMEOUT, "tests.sleep_for", "timeout", JobStatus.READY, 1),
    (Outcome.TIMEOUT, "tests.echo", "timeout", JobStatus.FAILED, 1),
    (Outcome.STALLED, "tests.sleep_for", "stalled", JobStatus.READY, 1),
    (Outcome.CRASHED, "tests.sleep_for", "crashed", JobStatus.READY, 1),
]


@pytest.mark.parametrize("ended, kind, event, status, attempts", TABLE)
def test_each_outcome_is_one_transition_one_event_and_one_log_line(
        ended, kind, event, status, attempts, caplog, django_capture_on_commit_callbacks):
    job = running(kind)
    with caplog.at_level(logging.DEBUG, logger="jobs"), \
            django_capture_on_commit_callbacks(execute=True):
        assert outcome.record(job, ended, error="what happened", delay_s=0) is True
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (status, attempts)
    assert row.lease_token is None and row.worker_id is None
    [noted] = JobEvent.objects.filter(job=job)
    assert (noted.kind, noted.data["status"]) == (event, status)
    [line] = history_of(caplog, job)
    assert line.event == event
    expected = {JobStatus.FAILED: logging.ERROR}.get(status, logging.WARNING if ended in outcome.RETRYING
                                                      else logging.INFO)
    assert line.levelno == expected
    # A second writer with the same lease changes nothing and notes nothing.
    assert outcome.record(job, ended, error="again") is False
    assert JobEvent.objects.filter(job=job).count() == 1


def test_an_expired_lease_is_one_rescue_noted_once(caplog, django_capture_on_commit_callbacks):
    job = running()
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with caplog.at_level(logging.INFO, logger="jobs"), \
            django_capture_on_commit_callbacks(execute=True):
        assert reaper.rescue_expired() == [job.pk]
        assert reaper.rescue_expired() == []
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.error_code) == (JobStatus.READY, 1, "lease_expired")
    assert [e.kind for e in JobEvent.objects.filter(job=job)] == ["expired"]
    assert [r.levelno for r in history_of(caplog, job)] == [logging.WARNING]
    # The attempt that lost its lease appears in the job's errors, like any failed attempt.
    assert [e["code"] for e in row.errors] == ["lease_expired"]


def test_a_cancel_asked_of_a_job_whose_worker_died_is_applied_by_the_rescue():
    job = running()
    services.cancel(job, reason="not needed")
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.rescue_expired() == [job.pk]
    assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    assert [e.kind for e in JobEvent.objects.filter(job=job)] == ["cancel_requested", "cancelled"]


def test_a_lost_lease_writes_nothing_but_says_so(caplog):
    job = running()
    Job.objects.filter(pk=job.pk).update(lease_token=None)  # another attempt owns it now
    with caplog.at_level(logging.INFO, logger="jobs"):
        assert outcome.record(job, Outcome.LEASE_LOST) is False
    assert not JobEvent.objects.filter(job=job).exists()
    [line] = [r for r in caplog.records if getattr(r, "job_id", None) == job.pk]
    assert line.levelno == logging.WARNING and "lost its lease" in line.getMessage()


def test_a_snooze_past_the_cap_fails_the_job_once(settings, caplog, django_capture_on_commit_callbacks):
    settings.JOBS_MAX_SNOOZES = 0
    job = running()
    with caplog.at_level(logging.INFO, logger="jobs"), \
            django_capture_on_commit_callbacks(execute=True):
        assert outcome.record(job, Outcome.SNOOZED, delay_s=5)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.error_code) == (JobStatus.FAILED, "snoozed_too_often")
    assert [e.kind for e in JobEvent.objects.filter(job=job)] == ["failed"]
    assert [r.levelno for r in history_of(caplog, job)] == [logging.ERROR]


def test_people_and_the_engine_note_each_transition_of_a_queued_job_once():
    job = services.enqueue("tests.noop", {})
    services.pause(job)
    services.resume(job)
    services.cancel(job)
    services.retry(job)
    kinds = list(JobEvent.objects.filter(job=job).values_list("kind", "data__status"))
    assert kinds == [("paused", "PAUSED"), ("resumed", "READY"), ("cancelled", "CANCELLED"),
                     ("retried", "READY")]


def test_superseding_notes_the_cancel_it_makes(user):
    first = services.enqueue("tests.unique", {"key": "a"}, owner=user)
    services.enqueue("tests.unique", {"key": "b"}, owner=user, supersede=True)
    first.refresh_from_db()
    assert (first.status, first.error_code) == (JobStatus.CANCELLED, "superseded")
    [noted] = JobEvent.objects.filter(job=first)
    assert (noted.kind, noted.data) == ("cancelled", {"code": "superseded", "status": "CANCELLED"})


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_writes_one_error_record_with_its_traceback(run_worker, caplog):
    job = services.enqueue("tests.fail_value_error", {})  # two attempts, no backoff
    with caplog.at_level(logging.INFO, logger="jobs"):
        run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    lines = history_of(caplog, job)
    assert [(r.event, r.levelno) for r in lines] == [("retry", logging.WARNING),
                                                     ("failed", logging.ERROR)]
    failed = lines[-1]
    assert failed.exc_info is not None and failed.exc_info[0] is ValueError
    assert "raise ValueError(\"bad value\")" in caplog.text  # the handler's own line, in the traceback
    assert failed.job_kind == "tests.fail_value_error" and failed.queue == "default"
