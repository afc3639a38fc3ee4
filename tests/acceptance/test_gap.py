"""A queue's gap is a rest after each job ends, kept by every worker of the fleet.

Two real runworker processes serve the `gapped` queue (one job at a time
across the deployment, a gap of GAP_S). Each job works longer than the gap,
so a gap counted from starts would be used up by the time the job ends and
the next one would start at once; counted from the end, there is a pause.
"""

import pytest

from jobs import services
from jobs.models import Job, JobStatus
from tests.acceptance.conftest import wait_for

GAP_S = 1.0
WORK_S = 1.5  # longer than the gap
# Both moments are the database's clock (the claim's and the completion's
# statements), so only the rounding of stored timestamps separates them.
CLOCK_SLACK_S = 0.002


@pytest.mark.slow
def test_the_next_job_starts_a_gap_after_the_last_one_ended_whichever_worker_takes_it(spawn_worker):
    services.set_queue("gapped", concurrency=1, gap_seconds=GAP_S)
    jobs = [services.enqueue("tests.gapped", {"seconds": WORK_S}) for _ in range(4)]
    # Each takes two at most, so both take part: the rest must hold across processes.
    for _ in range(2):
        spawn_worker("--queues", "gapped", "--concurrency", "2", "--max-jobs", "2")

    wait_for(lambda: Job.objects.filter(pk__in=[j.pk for j in jobs],
                                        status=JobStatus.SUCCESSFUL).count() == len(jobs), timeout=60)

    rows = sorted(Job.objects.filter(pk__in=[j.pk for j in jobs]), key=lambda job: job.started_at)
    for before, after in zip(rows, rows[1:], strict=False):
        rest_s = (after.started_at - before.finished_at).total_seconds()
        assert rest_s >= GAP_S - CLOCK_SLACK_S, (
            f"job {after.pk} started {rest_s:.3f} s after job {before.pk} ended; the gap is {GAP_S} s")
    assert len({row.worker_ids[-1] for row in rows}) == 2


POLL_S = 30.0  # far longer than the gap: a start that waited for a poll is plain to see
ON_TIME_S = 0.5  # the claim itself, the completion's commit, a busy machine


@pytest.mark.slow
@pytest.mark.parametrize("how", [
    "queued behind",
    # Another process's enqueue reaches an idle worker by NOTIFY; SQLite has only the poll.
    pytest.param("asked after the end", marks=pytest.mark.postgres),
])
def test_the_next_job_starts_when_the_rest_ends_not_at_the_next_poll(spawn_worker, how):
    """The claim that finds the queue resting tells its worker when the rest ends.

    "queued behind": the next job waits in the queue while the first one runs;
    "asked after the end": it is enqueued during the rest (the wake-up the enqueue
    sends finds the queue resting). Either way it starts at the rest's end.
    """
    services.set_queue("gapped", concurrency=1, gap_seconds=GAP_S)
    first = services.enqueue("tests.gapped", {"seconds": 0.2})
    second = services.enqueue("tests.gapped", {"seconds": 0}) if how == "queued behind" else None
    spawn_worker("--queues", "gapped", "--concurrency", "1", env={"JOBS_POLL_SECONDS": str(POLL_S)})
    wait_for(lambda: Job.objects.get(pk=first.pk).status == JobStatus.SUCCESSFUL, timeout=30)
    if second is None:
        second = services.enqueue("tests.gapped", {"seconds": 0})
    wait_for(lambda: Job.objects.get(pk=second.pk).status == JobStatus.SUCCESSFUL, timeout=POLL_S / 2)

    first.refresh_from_db()
    second.refresh_from_db()
    rest_s = (second.started_at - first.finished_at).total_seconds()
    assert GAP_S - CLOCK_SLACK_S <= rest_s < GAP_S + ON_TIME_S, (
        f"the second job started {rest_s:.3f} s after the first ended; the gap is {GAP_S} s "
        f"and the worker polls every {POLL_S} s")
