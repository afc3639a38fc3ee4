"""The rollup after a SIGKILLed worker: what it finished before the kill counts once, what it
was running counts once, when the worker that rescues it finishes it; no minute twice."""

import signal

import pytest

from jobs import services
from jobs.models import Job, JobRollup, JobStatus
from tests.acceptance.conftest import Ledger, wait_for

pytestmark = pytest.mark.slow


def test_a_killed_worker_leaves_every_job_counted_exactly_once(spawn_worker, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    quick = [services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": 0})
             for _ in range(5)]
    # Works until it is killed; the rescued attempt finishes at once.
    held = services.enqueue("tests.ledger", {"ledger": str(ledger.path), "seconds": [120, 0]},
                            priority=-10)
    first = spawn_worker("--worker-id", "first", "--concurrency", "2")
    wait_for(lambda: Job.objects.filter(pk__in=[j.pk for j in quick],
                                        status=JobStatus.SUCCESSFUL).count() == 5)
    wait_for(lambda: ledger.events("start", held.pk))
    counted_before = sum(JobRollup.objects.values_list("succeeded", flat=True))
    assert counted_before == 5
    first.send_signal(signal.SIGKILL)
    first.wait(5)
    spawn_worker("--worker-id", "second")  # not --burst: the job is RUNNING until its lease runs out
    wait_for(lambda: Job.objects.get(pk=held.pk).status == JobStatus.SUCCESSFUL, timeout=40)

    rows = list(JobRollup.objects.filter(kind="tests.ledger"))
    assert sum(r.succeeded for r in rows) == 6 == Job.objects.filter(status=JobStatus.SUCCESSFUL).count()
    # The killed attempt's lease ran out: a retry of the job, counted as such, once.
    assert sum(r.retried for r in rows) == 1
    assert sum(r.failed + r.cancelled for r in rows) == 0
    assert len({(r.queue, r.kind, r.minute) for r in rows}) == len(rows)  # one row per minute
    assert len(ledger.events("commit", held.pk)) == 1
