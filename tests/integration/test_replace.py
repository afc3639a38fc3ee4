"""Replace on duplicate: a burst of enqueues of one unique key debounces into one run, the last's."""

from datetime import timedelta

import pytest
from django.tasks import TaskResultStatus
from django.utils import timezone

from jobs import services
from jobs.engine import claiming, outcome
from jobs.models import Action, Job, JobEvent, JobStatus, Outcome, Worker
from tests import tasks
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_ten_enqueues_collapse_into_one_run_with_the_last_payload(run_worker):
    for n in range(10):
        # "Save → reindex in a moment": each save pushes the run back and brings its data.
        services.enqueue("tests.echo", {"n": n}, unique_key="reindex:7",
                         run_after=timezone.now() + timedelta(seconds=0.2 + n * 0.01),
                         replace=("payload", "run_after"))
    job = Job.objects.get()
    assert job.payload == {"n": 9}
    assert job.run_after >= job.enqueued_at + timedelta(seconds=0.29)
    wait_for(lambda: timezone.now() > job.run_after, timeout=5)  # --burst takes only what is due
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result["echo"]) == (JobStatus.SUCCESSFUL, 1, {"n": 9})


def test_without_replace_the_first_payload_stays():
    for n in range(3):
        services.enqueue("tests.echo", {"n": n}, unique_key="keep")
    assert Job.objects.get().payload == {"n": 0}


def test_replace_may_take_the_payload_alone():
    later = timezone.now() + timedelta(hours=1)
    services.enqueue("tests.echo", {"n": 0}, unique_key="only-payload", run_after=later)
    services.enqueue("tests.echo", {"n": 1}, unique_key="only-payload", replace=("payload",))
    job = Job.objects.get()
    assert job.payload == {"n": 1} and job.run_after == later


def claimed():
    """The READY `tests.echo` job, claimed by a worker."""
    worker = Worker.objects.get_or_create(name="w", host="h", pid=1)[0]
    [job] = claiming.claim(worker, queues=["default"], kinds=["tests.echo"], limit=1)
    return job


def running(**options):
    """A `tests.echo` job of key "busy" with payload {"n": 0}, claimed by a worker."""
    job = services.enqueue("tests.echo", {"n": 0}, unique_key="busy", **options)
    claim = claimed()
    assert claim.pk == job.pk
    return claim


def save(n, replace=("payload",), **options):
    """A save of the debounce example: its data asked of the job of key "busy"."""
    return services.enqueue("tests.echo", {"n": n}, unique_key="busy", replace=replace, **options)


def runs():
    return list(Job.objects.filter(unique_key="busy").order_by("id")
                .values_list("status", "payload", "asked_payload"))


def test_a_running_job_keeps_what_its_attempt_read_and_notes_the_payload_asked():
    job = running()
    again = save(1)
    assert again.pk == job.pk
    assert runs() == [(JobStatus.RUNNING, {"n": 0}, {"n": 1})]


@pytest.mark.parametrize("ended, status", [(Outcome.SUCCEEDED, JobStatus.SUCCESSFUL),
                                           (Outcome.FAILED, JobStatus.FAILED)])
def test_a_payload_replaced_while_it_ran_runs_once_more_with_the_last(ended, status, user):
    job = running(owner=user, priority=5)
    for n in (1, 2, 3):  # saves made during the reindex
        save(n)
    assert outcome.record(job, ended, error="what happened") is True
    assert runs() == [(status, {"n": 0}, None), (JobStatus.READY, {"n": 3}, None)]
    again = Job.objects.filter(unique_key="busy").latest("id")
    assert (again.attempts, again.owner_id, again.priority) == (0, user.pk, 5)
    [noted] = JobEvent.objects.filter(job=job, kind=Action.RUN_AGAIN)
    assert noted.data["run"] == again.pk
    # The extra run is the only one: it ends with nothing more asked.
    assert outcome.record(claimed(), Outcome.SUCCEEDED) is True
    assert [status for status, _payload, _asked in runs()] == [status, JobStatus.SUCCESSFUL]


def test_the_same_payload_asked_while_it_ran_still_runs_once_more():
    job = running()
    save(0)  # the data behind it may have changed after the attempt read it
    assert outcome.record(job, Outcome.SUCCEEDED) is True
    assert runs() == [(JobStatus.SUCCESSFUL, {"n": 0}, None), (JobStatus.READY, {"n": 0}, None)]


def test_a_cancelled_job_is_not_run_again_for_a_payload_asked():
    job = running()
    save(1)
    assert outcome.record(job, Outcome.CANCELLED) is True
    assert [status for status, _payload, _asked in runs()] == [JobStatus.CANCELLED]


@pytest.mark.parametrize("ended, status", [
    (Outcome.RETRY, JobStatus.READY),
    (Outcome.SNOOZED, JobStatus.READY),
    (Outcome.REQUEUED, JobStatus.READY),
    (Outcome.PAUSED, JobStatus.PAUSED),
])
def test_a_job_that_goes_back_takes_the_last_payload_asked_itself(ended, status):
    job = running(max_attempts=3)
    save(1)
    save(2)
    assert outcome.record(job, ended, delay_s=0) is True
    assert runs() == [(status, {"n": 2}, None)]
    if status == JobStatus.READY:  # it runs with it, and only once
        assert outcome.record(claimed(), Outcome.SUCCEEDED) is True
        assert runs() == [(JobStatus.SUCCESSFUL, {"n": 2}, None)]


def test_a_run_after_replaced_while_it_ran_asks_no_extra_run():
    job = running()
    again = save(1, replace=("run_after",), run_after=timezone.now() + timedelta(hours=1))
    assert again.pk == job.pk
    assert runs() == [(JobStatus.RUNNING, {"n": 0}, None)]
    assert outcome.record(job, Outcome.SUCCEEDED) is True
    assert runs() == [(JobStatus.SUCCESSFUL, {"n": 0}, None)]


def test_replace_is_checked_before_anything_is_written():
    with pytest.raises(ValueError, match="unique key"):
        services.enqueue("tests.echo", {"n": 0}, replace=("payload",))
    with pytest.raises(ValueError, match="replace takes"):
        services.enqueue("tests.echo", {"n": 0}, unique_key="k", replace=("priority",))
    assert not Job.objects.exists()


def test_the_tasks_api_replaces_a_queued_tasks_arguments(run_worker):
    for n in range(5):
        result = tasks.add.with_job_options(unique_key="sum", replace=("payload",)).enqueue(n, n)
    run_worker()
    fetched = tasks.add.get_result(result.id)
    assert (fetched.status, fetched.return_value) == (TaskResultStatus.SUCCESSFUL, 8)
    assert Job.objects.count() == 1
