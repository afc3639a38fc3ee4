"""Newer data asked of a running job is not dropped: it runs again for it (PostgreSQL and SQLite)."""

import pytest

from jobs import services
from jobs.engine import claiming, enqueue, outcome
from jobs.models import Action, Job, JobEvent, JobStatus, Outcome, Worker

pytestmark = pytest.mark.django_db


def running(data="v1", **options):
    """A `tests.unique` job (key "k", fingerprint `data`) claimed by a worker."""
    job = services.enqueue("tests.unique", {"key": "k", "data": data}, **options)
    worker = Worker.objects.create(name="w", host="h", pid=1)
    [claimed] = claiming.claim(worker, queues=[job.queue], kinds=["tests.unique"], limit=1)
    assert claimed.pk == job.pk
    return claimed


def ask(data):
    return services.enqueue("tests.unique", {"key": "k", "data": data})


def jobs_of_the_key():
    return list(Job.objects.filter(unique_key="k").order_by("id")
                .values_list("status", "fingerprint", "asked_fingerprint"))


def test_a_request_with_new_data_merges_into_the_running_job_and_is_noted_on_it(user):
    job = running(owner=user)
    merged = ask("v2")
    assert merged.pk == job.pk
    assert jobs_of_the_key() == [(JobStatus.RUNNING, "v1", "v2")]
    ask("v3")  # the latest request's data is the one run next
    assert jobs_of_the_key() == [(JobStatus.RUNNING, "v1", "v3")]


def test_a_request_for_the_running_jobs_own_data_withdraws_what_was_asked():
    running()
    ask("v2")
    ask("v1")
    assert jobs_of_the_key() == [(JobStatus.RUNNING, "v1", "")]


@pytest.mark.parametrize("ended", [Outcome.SUCCEEDED, Outcome.FAILED])
def test_a_job_that_ends_runs_again_for_the_data_asked_while_it_ran(ended, user):
    job = running(owner=user, priority=5)
    ask("v2")
    assert outcome.record(job, ended, error="what happened") is True
    old, again = Job.objects.filter(unique_key="k").order_by("id")
    assert (old.pk, old.fingerprint, old.asked_fingerprint) == (job.pk, "v1", "")
    assert old.status == (JobStatus.SUCCESSFUL if ended == Outcome.SUCCEEDED else JobStatus.FAILED)
    assert (again.status, again.fingerprint, again.attempts) == (JobStatus.READY, "v2", 0)
    assert (again.kind, again.payload, again.owner_id, again.priority, again.queue) == (
        job.kind, job.payload, user.pk, 5, job.queue)
    [noted] = JobEvent.objects.filter(job=job, kind=Action.RUN_AGAIN)
    assert noted.data["run"] == again.pk
    # Asking once more for what is now queued merges into that run.
    assert ask("v2").pk == again.pk


def test_a_batch_of_successes_runs_again_only_the_jobs_asked_for_again():
    job = running()
    other = services.enqueue("tests.noop", {})
    worker = Worker.objects.get()
    [other] = claiming.claim(worker, queues=[other.queue], kinds=["tests.noop"], limit=1)
    ask("v2")
    assert set(outcome.record_successes([(job, None), (other, None)])) == {job.pk, other.pk}
    assert jobs_of_the_key() == [(JobStatus.SUCCESSFUL, "v1", ""), (JobStatus.READY, "v2", "")]
    assert Job.objects.filter(kind="tests.noop").get().status == JobStatus.SUCCESSFUL


def test_a_run_again_that_cannot_be_queued_is_logged_and_the_job_still_ends(monkeypatch, caplog):
    job = running()
    ask("v2")

    def refuse(*args, **kwargs):
        raise RuntimeError("the queue refused it")

    monkeypatch.setattr(enqueue, "_enqueue_one", refuse)
    assert outcome.record(job, Outcome.SUCCEEDED) is True
    assert jobs_of_the_key() == [(JobStatus.SUCCESSFUL, "v1", "")]
    assert f"running job {job.pk} again for newer data failed" in caplog.text


def test_a_success_with_nothing_asked_queues_nothing():
    job = running()
    ask("v1")
    assert outcome.record(job, Outcome.SUCCEEDED) is True
    assert jobs_of_the_key() == [(JobStatus.SUCCESSFUL, "v1", "")]


@pytest.mark.parametrize("ended, status, attempts", [
    (Outcome.RETRY, JobStatus.READY, 0),      # new data: its attempts start again
    (Outcome.SNOOZED, JobStatus.READY, 0),
    (Outcome.REQUEUED, JobStatus.READY, 0),
    (Outcome.PAUSED, JobStatus.PAUSED, 0),    # a pause gives its attempt back
])
def test_a_job_that_goes_back_takes_the_data_asked_itself(ended, status, attempts):
    job = running(max_attempts=3)
    ask("v2")
    assert outcome.record(job, ended, delay_s=0) is True
    row = Job.objects.get()
    assert (row.pk, row.status, row.fingerprint, row.asked_fingerprint, row.attempts) == (
        job.pk, status, "v2", "", attempts)


def test_a_cancelled_job_is_not_run_again():
    job = running()
    ask("v2")
    assert outcome.record(job, Outcome.CANCELLED) is True
    assert [status for status, _fp, _asked in jobs_of_the_key()] == [JobStatus.CANCELLED]


def test_a_lost_lease_changes_nothing_and_keeps_what_was_asked():
    job = running()
    ask("v2")
    Job.objects.filter(pk=job.pk).update(lease_token=None)  # another attempt owns it now
    assert outcome.record(job, Outcome.SUCCEEDED) is False
    assert jobs_of_the_key() == [(JobStatus.RUNNING, "v1", "v2")]


def replace(data, n):
    """A request for `data` that replaces the payload, `n` telling its payloads apart."""
    return services.enqueue("tests.unique", {"key": "k", "data": data, "n": n},
                            replace=("payload",))


@pytest.mark.parametrize("data", ["v2", "v1"])
def test_a_job_that_ends_runs_again_with_the_payload_asked_and_its_data(data):
    """New data runs for its fingerprint; a payload asked for the running job's own data
    still runs once more, and is not answered by the job that just ended."""
    job = running()
    replace(data, 1)
    replace(data, 2)
    assert outcome.record(job, Outcome.SUCCEEDED) is True
    old, again = Job.objects.filter(unique_key="k").order_by("id")
    assert (old.status, old.fingerprint, old.asked_fingerprint, old.asked_payload) == (
        JobStatus.SUCCESSFUL, "v1", "", None)
    assert (again.status, again.fingerprint, again.payload) == (
        JobStatus.READY, data, {"key": "k", "data": data, "n": 2})


def test_a_job_that_goes_back_takes_both_the_data_and_the_payload_asked():
    job = running(max_attempts=3)
    replace("v2", 1)
    assert outcome.record(job, Outcome.RETRY, delay_s=0) is True
    row = Job.objects.get()
    assert (row.status, row.fingerprint, row.asked_fingerprint, row.attempts) == (
        JobStatus.READY, "v2", "", 0)
    assert (row.payload, row.asked_payload) == ({"key": "k", "data": "v2", "n": 1}, None)
