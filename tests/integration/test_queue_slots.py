"""Per-queue slots: `runworker --queues downloads=4,default=16` gives each queue its own slots."""

import signal
import threading

import pytest
from django.core.management import CommandError, call_command

from jobs import services
from jobs.management.commands.runworker import parse_queues
from jobs.models import Job, JobStatus
from jobs.runtime.worker import Worker
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def start(fast_engine, **options):
    worker = Worker(**options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def heavy(tmp_path, count):
    """Jobs on the downloads queue, each busy until its worker stops it."""
    return [services.enqueue("tests.sleep_for", {"seconds": 120}, queue="downloads")
            for _ in range(count)]


def running(queue):
    return Job.objects.filter(queue=queue, status=JobStatus.RUNNING).count()


def test_an_inline_job_runs_while_every_download_slot_is_busy(fast_engine, tmp_path):
    waiting = heavy(tmp_path, 4)
    worker, thread = start(fast_engine, slots={"downloads": 2, "default": 1})
    try:
        wait_for(lambda: running("downloads") == 2, timeout=30)
        inline = services.enqueue("tests.echo", {"n": 1})
        wait_for(lambda: Job.objects.get(pk=inline.pk).status == JobStatus.SUCCESSFUL, timeout=30)
        # Both download slots stayed busy, and their queue never got a third.
        assert running("downloads") == 2
        assert Job.objects.filter(pk__in=[j.pk for j in waiting], status=JobStatus.READY).count() == 2
        assert worker.concurrency == 3 and worker.queues == ["downloads", "default"]
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_shared_pool_lets_downloads_take_every_slot(fast_engine, tmp_path):
    heavy(tmp_path, 3)
    worker, thread = start(fast_engine, queues=["downloads", "default"], concurrency=2)
    try:
        wait_for(lambda: running("downloads") == 2, timeout=30)
        inline = services.enqueue("tests.echo", {"n": 1})
        # What per-queue slots are for: with one pool the inline job waits its turn.
        assert not wait_for_status(inline, JobStatus.SUCCESSFUL, seconds=2)
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def wait_for_status(job, status, *, seconds):
    from tests.waiting import wait_until

    return wait_until(lambda: Job.objects.get(pk=job.pk).status == status, timeout=seconds)


@pytest.mark.parametrize(("text", "parsed"), [
    ("", ([], None)),
    ("a,b", (["a", "b"], None)),
    ("downloads=4,insights=1,default=16", (["downloads", "insights", "default"],
                                          {"downloads": 4, "insights": 1, "default": 16})),
    (" downloads = 4 , default=1 ,", (["downloads", "default"], {"downloads": 4, "default": 1})),
])
def test_queues_parse(text, parsed):
    assert parse_queues(text) == parsed


@pytest.mark.parametrize(("text", "says"), [
    ("downloads=4,default", "every queue its slots"),
    ("downloads=0", "from 1 to 1000"),
    ("downloads=four", "from 1 to 1000"),
    ("downloads=-1", "from 1 to 1000"),
    ("downloads=4,downloads=2", "named twice"),
    ("bad name=2", "no queue name"),
    ("=3", "no queue name"),
])
def test_bad_queues_are_refused_with_a_sentence(text, says):
    with pytest.raises(CommandError, match=says):
        call_command("runworker", "--queues", text, "--burst")


@pytest.fixture
def own_signals():
    """runworker installs its SIGTERM and SIGINT handlers in this process: pytest's go back."""
    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def test_a_queue_nothing_uses_is_named_when_the_worker_starts(fast_engine, own_signals, capsys):
    call_command("runworker", "--queues", "default,defualt", "--burst")
    said = capsys.readouterr().err
    assert "no registered kind, Tasks backend or JOBS_QUEUES names defualt;" in said
    assert "known queues: default," in said


def test_the_known_queues_start_without_a_warning(fast_engine, own_signals, capsys):
    call_command("runworker", "--queues", "default,downloads", "--burst")
    assert "--queues" not in capsys.readouterr().err
