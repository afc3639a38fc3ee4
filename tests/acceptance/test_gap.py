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
