"""A workflow survives its worker: a real runworker killed right after each parent's commit."""

import pytest

from jobs import services
from jobs.models import Job, JobStatus
from tests.acceptance.conftest import wait_for

pytestmark = pytest.mark.slow


def test_a_chain_of_three_completes_in_order_with_a_worker_killed_after_each_commit(
        spawn_worker, tmp_path):
    ledger, kills = tmp_path / "ledger", tmp_path / "kills"
    kills.mkdir()
    first = services.enqueue("tests.chain", {"ledger": str(ledger), "name": "first"})
    second = services.enqueue("tests.chain", {"ledger": str(ledger), "name": "second"},
                              depends_on=[first])
    third = services.enqueue("tests.chain", {"ledger": str(ledger), "name": "third"},
                             depends_on=[second])
    env = {"TESTS_KILL_AFTER_COMMIT": str(kills)}  # tests/handlers.py: SIGKILL after a success commits
    killed = []
    for job in (first, second, third):
        proc = spawn_worker("--concurrency", "2", "--queues", "default", env=env)
        assert proc.wait(60) == -9, proc.output()  # died of its own SIGKILL, after the commit
        killed.append(job.pk)
        assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCESSFUL, proc.output()
        # The next step was decided in that commit: no signal in the dead process was needed.
        if job is not third:
            nxt = second if job is first else third
            assert Job.objects.get(pk=nxt.pk).blocked_key is None
    assert sorted(int(p.name.rsplit("-", 1)[1]) for p in kills.iterdir()) == sorted(killed)
    lines = [line.split() for line in ledger.read_text().splitlines()]
    steps = [name for _step, name, _id, _parents in lines]
    order = ["first", "second", "third"]
    # In order: no step ever began before its parent had succeeded.
    assert steps == sorted(steps, key=order.index) and set(steps) == set(order), steps
    assert all(parents == "SUCCESSFUL" for _step, name, _id, parents in lines if name != "first")
    # The dying worker may claim (even begin) the child its commit made ready: that attempt
    # dies with it and is rescued once its lease runs out. A step runs again only then.
    for job in (first, second, third):
        rescued = job.events.filter(kind="expired").count()
        assert steps.count(job.payload["name"]) <= 1 + rescued, (steps, rescued)
    # A worker that outlives the chain finds nothing left behind.
    proc = spawn_worker("--burst", "--queues", "default", env=env)
    assert proc.wait(60) == 0, proc.output()
    wait_for(lambda: not Job.objects.exclude(status=JobStatus.SUCCESSFUL).exists(), timeout=5)
