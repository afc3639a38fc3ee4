"""Django's Tasks API, run by Haulage workers."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from jobs import services
from jobs.exceptions import InvalidPayload
from jobs.models import ConcurrencyLimit, Job, JobStatus
from tests import tasks
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_default_backend_is_haulage():
    assert type(task_backends["default"]).__name__ == "HaulageBackend"
    assert default_task_backend.supports_defer and default_task_backend.supports_priority
    assert default_task_backend.supports_get_result


def test_enqueue_run_and_get_the_result(run_worker):
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    run_worker(name="w-one")
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 5
    assert fetched.worker_ids == ["w-one"]
    assert fetched.started_at and fetched.finished_at and fetched.enqueued_at
    result.refresh()
    assert result.return_value == 5


def test_priority_and_queue_come_from_the_task():
    result = tasks.shout.enqueue("hi")
    job = Job.objects.get(public_id=result.id)
    assert (job.priority, job.queue, job.kind) == (5, "default", "django.task")


def test_a_task_enqueued_in_a_rolled_back_transaction_never_runs(run_worker):
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            tasks.add.enqueue(1, 1)
            raise RuntimeError("roll back")
    assert not Job.objects.exists()


def test_a_failing_task_records_the_exception_and_retries_append_worker_ids(run_worker):
    result = tasks.flaky.enqueue()
    for name in ("w1", "w2", "w3"):
        # Skip the backoff: each burst worker runs one attempt.
        Job.objects.filter(public_id=result.id).update(run_after=Job.objects.get(public_id=result.id).enqueued_at)
        run_worker(name=name)
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.worker_ids == ["w1", "w2", "w3"]
    assert fetched.attempts == 3
    assert fetched.errors[-1].exception_class is ValueError
    assert "raise ValueError" in fetched.errors[-1].traceback
    with pytest.raises(ValueError, match="Task failed"):
        fetched.return_value  # noqa: B018


@pytest.mark.parametrize(("failing", "exception", "last_line"), [
    (tasks.exits, SystemExit, "SystemExit: 3\n"),
    (tasks.interrupts, KeyboardInterrupt, "KeyboardInterrupt: interrupted by the task itself\n"),
], ids=["sys.exit", "KeyboardInterrupt"])
def test_a_task_raising_a_base_exception_fails_with_its_traceback_and_its_executor_goes_on(
        run_worker, failing, exception, last_line, caplog):
    failed = failing.enqueue()
    after = tasks.add.enqueue(2, 3)
    # One slot: the job behind it runs only if the first one's attempt ended
    # and gave its slot back.
    run_worker(concurrency=1)
    result = default_task_backend.get_result(failed.id)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class is exception
    assert result.errors[-1].traceback.endswith(last_line), result.errors[-1].traceback
    job = Job.objects.get(public_id=failed.id)
    assert (job.worker_id, job.lease_token, job.lease_expires_at) == (None, None, None)
    assert tasks.add.get_result(after.id).return_value == 5
    # The attempt recorded the exception itself: none reached the executor's
    # last-resort catch. (Counting executor threads would race: the freed slot
    # can be claimed again before the thread counts itself idle.)
    assert not [r for r in caplog.records if "crashed its executor" in r.getMessage()]


def test_a_sys_exit_spends_an_attempt_and_is_retried_like_any_exception(run_worker):
    result = tasks.exits_on_the_first_attempt.enqueue()
    run_worker()
    job = Job.objects.get(public_id=result.id)
    assert (job.status, job.attempts, job.error) == (JobStatus.READY, 1, "SystemExit: the first attempt exits")
    Job.objects.filter(pk=job.pk).update(run_after=job.enqueued_at)  # skip the backoff
    run_worker()
    fetched = default_task_backend.get_result(result.id)
    assert fetched.return_value == 2
    assert [error.exception_class for error in fetched.errors] == [SystemExit]


def test_started_at_is_the_first_attempts_start_and_last_attempted_at_the_latest(run_worker):
    result = tasks.which_attempt.enqueue(fail_until=2)
    job = Job.objects.get(public_id=result.id)
    Job.objects.filter(pk=job.pk).update(max_attempts=2)
    run_worker()
    first_start = Job.objects.get(pk=job.pk).started_at
    Job.objects.filter(pk=job.pk).update(run_after=job.enqueued_at)
    run_worker()
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.started_at == first_start
    assert fetched.last_attempted_at == Job.objects.get(pk=job.pk).started_at
    assert fetched.started_at < fetched.last_attempted_at <= fetched.finished_at


def test_a_job_attempted_before_first_starts_were_recorded_keeps_that_start(run_worker):
    result = tasks.add.enqueue(1, 1)
    earlier = timezone.now() - timedelta(hours=1)
    # As a row written before the column existed: attempted once, no first start.
    Job.objects.filter(public_id=result.id).update(started_at=earlier, first_started_at=None,
                                                   attempts=1, max_attempts=2)
    run_worker()
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.started_at == earlier < fetched.last_attempted_at


def test_context_carries_the_attempt_number(run_worker):
    result = tasks.which_attempt.using(priority=1).enqueue(fail_until=2)
    job = Job.objects.get(public_id=result.id)
    Job.objects.filter(pk=job.pk).update(max_attempts=2)
    run_worker()
    Job.objects.filter(pk=job.pk).update(run_after=job.enqueued_at)
    run_worker()
    fetched = default_task_backend.get_result(result.id)
    assert fetched.return_value == {"attempt": 2, "id": result.id}


def test_a_context_is_djangos_task_context_with_should_stop(run_worker):
    result = tasks.describes_its_context.enqueue()
    run_worker()
    fetched = default_task_backend.get_result(result.id)
    assert fetched.return_value == {"task_context": True, "id": result.id, "attempt": 1,
                                    "should_stop": False}


def test_a_task_without_context_gets_only_its_arguments(run_worker):
    result = tasks.add.enqueue(2, b=3)
    assert Job.objects.get(public_id=result.id).payload["takes_context"] is False
    run_worker()
    assert tasks.add.get_result(result.id).return_value == 5


def start_background_worker():
    from jobs.runtime.worker import Worker

    worker = Worker(concurrency=2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def wait_until_working(result):
    """The task runs and has reported progress through its context (its result's id as message)."""
    wait_for(lambda: Job.objects.filter(public_id=result.id, status=JobStatus.RUNNING,
                                        phase="working", progress_message=result.id).exists())


@pytest.mark.parametrize(("action", "final", "task_status"), [
    ("cancel", JobStatus.CANCELLED, TaskResultStatus.FAILED),
    ("pause", JobStatus.PAUSED, TaskResultStatus.READY),
])
def test_a_task_that_checks_should_stop_ends_when_staff_stop_it(fast_engine, action, final, task_status):
    result = tasks.works_until_stopped.enqueue()
    worker, thread = start_background_worker()
    try:
        wait_until_working(result)
        getattr(services, action)(Job.objects.get(public_id=result.id), reason="test")
        # An inline attempt is recorded only when its function returns: this state
        # is reached only because the task saw should_stop() and returned.
        wait_for(lambda: Job.objects.get(public_id=result.id).status == final)
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    assert default_task_backend.get_result(result.id).status == task_status
    job = Job.objects.get(public_id=result.id)
    assert job.result is None and job.lease_token is None


def test_a_task_that_checks_should_stop_hands_its_job_back_when_the_worker_shuts_down(fast_engine):
    result = tasks.works_until_stopped.enqueue()
    worker, thread = start_background_worker()
    wait_until_working(result)
    worker.request_stop()
    thread.join(30)
    assert not thread.is_alive()
    # The task returned: its attempt was settled and its slot given back, not left
    # running for the shutdown to record over.
    assert not worker.running
    job = Job.objects.get(public_id=result.id)
    assert (job.status, job.attempts) == (JobStatus.READY, 0)
    assert list(job.events.values_list("kind", flat=True)) == ["requeued"]


def test_signals_are_sent(run_worker):
    seen = []

    def record(name):
        def receiver(sender, task_result, **kwargs):
            seen.append((name, task_result.status))
        return receiver

    receivers = {task_enqueued: record("enqueued"), task_started: record("started"),
                 task_finished: record("finished")}
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        run_worker()
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_unknown_and_malformed_ids_do_not_exist():
    for bad in ["nope", "00000000-0000-0000-0000-000000000000", "", "'; DROP TABLE jobs_job; --"]:
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(bad)


def test_arguments_must_be_json_and_nothing_is_written():
    # Django documents TypeError and words it "Unsupported type"; ours adds the sentence.
    with pytest.raises(TypeError, match="Unsupported type") as raised:
        tasks.add.enqueue(datetime.now(), 1)
    assert str(raised.value).startswith("Task arguments must be JSON: ")
    # What callers caught before still catches it.
    assert isinstance(raised.value, InvalidTask) and isinstance(raised.value, InvalidPayload)
    with pytest.raises(TypeError, match="JSON"):
        tasks.add.enqueue(float("nan"), 1)
    with pytest.raises(TypeError, match="JSON"):
        tasks.add.enqueue(1, b=[{1: "keys must be strings"}])
    assert not Job.objects.exists()


def test_aenqueue_raises_the_same_type_error_and_writes_nothing():
    # Its own thread and event loop: a browser test before it in this process
    # may have left a loop running in the main thread.
    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(asyncio.run, tasks.add.aenqueue(object(), 1))
        with pytest.raises(TypeError, match="Unsupported type"):
            outcome.result()
    assert not Job.objects.exists()


def test_validation_happens_at_decoration_without_the_database(django_assert_num_queries):
    with django_assert_num_queries(0):
        with pytest.raises(InvalidTask, match="priority"):
            task(priority=101)(tasks.add.func)
        with pytest.raises(InvalidTask, match="max_attempts"):
            task(max_attempts=0)(tasks.add.func)
        with pytest.raises(InvalidTask, match="timeout"):
            task(timeout=-1)(tasks.add.func)
        with pytest.raises(InvalidTask, match="Queue"):
            task(queue_name="nowhere")(tasks.add.func)


def test_unique_tasks_merge_by_arguments():
    first = tasks.once_per_argument.enqueue("a")
    again = tasks.once_per_argument.enqueue("a")
    other = tasks.once_per_argument.enqueue("b")
    assert first.id == again.id != other.id


def test_a_timeout_fails_the_attempt(run_worker):
    result = tasks.slow.enqueue(3)
    run_worker()
    job = Job.objects.get(public_id=result.id)
    assert job.error_code == "timeout"


def test_a_non_json_return_value_fails_clearly(run_worker):
    result = tasks.returns_a_set.enqueue()
    run_worker()
    job = Job.objects.get(public_id=result.id)
    assert job.status in (JobStatus.FAILED, JobStatus.READY)
    assert "TypeError" in job.error


def test_concurrency_limit_becomes_a_key_with_that_limit():
    tasks.exclusive.enqueue()
    assert ConcurrencyLimit.objects.get(key="task:tests.tasks.exclusive").limit == 1


def test_per_call_options(user):
    result = tasks.add.with_job_options(unique_key="sum-1", owner=user, concurrency_key="user:1").enqueue(1, 2)
    again = tasks.add.with_job_options(unique_key="sum-1").enqueue(1, 2)
    assert result.id == again.id
    job = Job.objects.get(public_id=result.id)
    assert job.owner == user and job.concurrency_keys == ["user:1"]


def test_cancelled_maps_to_failed_with_a_reason():
    result = tasks.add.enqueue(1, 1)
    services.cancel(Job.objects.get(public_id=result.id))
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.errors[-1].exception_class_path == "jobs.exceptions.JobCancelled"


def test_a_task_is_validated_once_by_its_backend_not_at_every_enqueue(monkeypatch):
    from django.tasks.backends.base import BaseTaskBackend

    made = task(priority=7)(tasks.add.func)  # validated here, as Django's Task does
    checks = []
    real = BaseTaskBackend.validate_task
    monkeypatch.setattr(BaseTaskBackend, "validate_task",
                        lambda self, t: (checks.append(t), real(self, t)))
    made.enqueue(1, 2)
    made.enqueue(3, 4)
    assert checks == []
    other = made.using(priority=8)  # a new Task: validated when made, not again at enqueue
    other.enqueue(5, 6)
    assert checks == [other]
    assert list(Job.objects.order_by("id").values_list("priority", flat=True)) == [7, 7, 8]


def test_a_backend_made_anew_by_a_changed_tasks_setting_validates_the_task_again(settings):
    made = task(queue_name="default")(tasks.add.func)
    made.enqueue(1, 2)
    settings.TASKS = {"default": {"BACKEND": "jobs.backend.HaulageBackend", "QUEUES": ["other"]}}
    with pytest.raises(InvalidTask, match="Queue"):
        made.enqueue(3, 4)
    assert Job.objects.count() == 1


def test_arguments_are_stored_and_returned_as_djangos_normalize_json_makes_them():
    """Plain values skip the normalising walk; anything else still takes it."""
    from django.utils.json import normalize_json

    calls = [
        ((1, "two", 3.5, True, None), {"key": "value", "none": None}),
        (((1, 2), b"bytes", [("nested", b"x")]), {"mapping": {"a": (1,)}, "number": 7}),
    ]
    for args, kwargs in calls:
        result = tasks.add.enqueue(*args, **kwargs)
        stored = Job.objects.get(public_id=result.id).payload
        expected = normalize_json({"args": list(args), "kwargs": kwargs})
        assert {"args": stored["args"], "kwargs": stored["kwargs"]} == expected
        assert (result.args, result.kwargs) == (expected["args"], expected["kwargs"])
        fetched = tasks.add.get_result(result.id)
        assert (fetched.args, fetched.kwargs) == (expected["args"], expected["kwargs"])


def test_a_task_result_is_the_one_djangos_own_constructor_makes():
    """Its args and kwargs are not walked again (they come from the payload, JSON already),
    and nothing else differs: a field Django adds would show here."""
    from django.tasks import TaskResult

    from jobs.backend import to_task_result

    result = tasks.add.enqueue(["x"], b={"c": 1})
    job = Job.objects.get(public_id=result.id)
    made = TaskResult(task=tasks.add, id=str(job.public_id), status=TaskResultStatus.READY,
                      enqueued_at=job.enqueued_at, started_at=None, finished_at=None,
                      last_attempted_at=None, args=[["x"]], kwargs={"b": {"c": 1}},
                      backend="default", errors=[], worker_ids=[])
    assert to_task_result(job, task=tasks.add) == made
    assert type(result) is TaskResult and result == made
