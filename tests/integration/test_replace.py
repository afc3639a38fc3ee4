"""Replace on duplicate: a burst of enqueues of one unique key debounces into one run, the last's."""

from datetime import timedelta

import pytest
from django.tasks import TaskResultStatus
from django.utils import timezone

from jobs import services
from jobs.engine import claiming
from jobs.models import Job, JobStatus, Worker
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


def test_a_running_job_keeps_what_its_attempt_read():
    services.enqueue("tests.echo", {"n": 0}, unique_key="busy")
    worker = Worker.objects.create(name="w", host="h", pid=1)
    [running] = claiming.claim(worker, queues=["default"], kinds=["tests.echo"], limit=1)
    again = services.enqueue("tests.echo", {"n": 1}, unique_key="busy", replace=("payload",))
    assert again.pk == running.pk and Job.objects.get().payload == {"n": 0}


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
