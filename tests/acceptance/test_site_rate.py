"""Downloads from one site start at its rate: a subscription of 20 entries, run by a real
runworker against a loopback origin, never starts more fetches in a window than the rate allows."""

import pytest

from downloads.models import Download
from jobs.models import Job, JobStatus, RateLimit
from subscriptions import services
from tests.acceptance.conftest import wait_for
from tests.integration.test_subscriptions import publish
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

RATE, PERIOD_S = 4, 2.0  # DOWNLOADS_SITE_RATE=4/2s


def most_in_a_window(moments, period_s):
    moments = sorted(moments)
    return max(sum(1 for t in moments[i:] if t < start + period_s) for i, start in enumerate(moments))


def test_twenty_entries_of_one_site_start_at_the_sites_rate(spawn_worker, media_root, origin,
                                                            settings, user):
    allowed = f"127.0.0.1:{origin.port}"
    settings.DOWNLOADS_EGRESS_ALLOW = allowed
    sub = services.subscribe(user, publish(origin, 20), fmt="best", interval_s=3600)
    proc = spawn_worker("--concurrency", "8", "--queues", "subscriptions,downloads", env={
        "MEDIA_ROOT": str(media_root), "DOWNLOADS_EGRESS_ALLOW": allowed,
        "DOWNLOADS_SEGMENT_AUTOMATICALLY": "0", "DOWNLOADS_SITE_RATE": f"{RATE}/{PERIOD_S:g}s",
        # Neither the user's nor the site's concurrency is what holds them back here.
        "DOWNLOADS_SITE_CONCURRENCY": "20", "DOWNLOADS_DEFAULT_CONCURRENT": "20",
        "DOWNLOADS_DEFAULT_QUEUED": "50"})
    # While they run, the ones past the rate wait out of the claim index.
    held = wait_until(lambda: Job.objects.filter(kind="downloads.fetch",
                                                  blocked_key="@rate:site:127.0.0.1").first(),
                      timeout=60, interval=0.1)
    assert held, proc.output()
    rows = wait_for(lambda: (lambda rows: rows if len(rows) == 20 and not any(
        r.is_live for r in rows) else None)(list(Download.objects.filter(owner=user)
                                                .select_related("job"))), timeout=120, interval=0.2)
    assert [r.current_status for r in rows] == ["successful"] * 20, proc.output()
    jobs = [r.job for r in rows]
    assert {job.rate_key for job in jobs} == {"site:127.0.0.1"}
    assert all("site:127.0.0.1" in job.concurrency_keys for job in jobs)
    row = RateLimit.objects.get(key="site:127.0.0.1")
    assert (row.limit, row.period_seconds) == (RATE, PERIOD_S)
    # By the database's clock; a hair under the period for the two clocks' rounding.
    assert most_in_a_window([job.first_started_at.timestamp() for job in jobs], PERIOD_S - 0.01) \
        <= RATE
    assert Job.objects.get(pk=sub.check_job_id).status == JobStatus.SUCCESSFUL
