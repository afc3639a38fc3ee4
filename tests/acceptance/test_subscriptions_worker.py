"""Subscriptions end to end: a real runworker runs the check and the downloads it requests in
supervised children, against a real feed on a loopback origin."""

import pytest
from django.utils import timezone

from downloads.models import Download
from jobs.models import Job
from subscriptions import scheduled, services
from subscriptions.models import Subscription
from tests.acceptance.conftest import wait_for
from tests.integration.test_subscriptions import clips, publish

pytestmark = pytest.mark.slow


@pytest.fixture
def worker(spawn_worker, media_root, origin, settings):
    allowed = f"127.0.0.1:{origin.port}"
    settings.DOWNLOADS_EGRESS_ALLOW = allowed  # for the subscribe made in this process

    def start():
        return spawn_worker("--concurrency", "4", "--queues", "subscriptions,downloads", env={
            "MEDIA_ROOT": str(media_root), "DOWNLOADS_EGRESS_ALLOW": allowed,
            "DOWNLOADS_SEGMENT_AUTOMATICALLY": "0"})

    return start


def settled(owner, count):
    """The owner's downloads once `count` exist and none is live, else None."""
    rows = list(Download.objects.filter(owner=owner).select_related("job", "asset"))
    if len(rows) == count and not any(row.is_live for row in rows):
        return rows
    return None


def check_finished(sub):
    job = Subscription.objects.select_related("check_job").get(pk=sub.pk).check_job
    return job is not None and job.is_finished


def test_a_growing_feed_is_downloaded_once_per_entry(worker, origin, user):
    sub = services.subscribe(user, publish(origin, 3), fmt="best", interval_s=3600)
    proc = worker()
    first = wait_for(lambda: settled(user, 3), timeout=90, interval=0.2)
    assert [d.current_status for d in first] == ["successful"] * 3, proc.output()
    assert sorted(d.asset.url for d in first) == clips(origin, 0, 1, 2)
    wait_for(lambda: check_finished(sub), timeout=30)
    sub.refresh_from_db()
    assert (sub.last_outcome, sub.last_new, sub.last_requested) == ("ok", 3, 3), proc.output()

    publish(origin, 5)
    Subscription.objects.filter(pk=sub.pk).update(next_check_at=timezone.now())
    assert scheduled.check_due() == 1  # what the schedule fires every minute
    every = wait_for(lambda: settled(user, 5), timeout=90, interval=0.2)
    assert [d.current_status for d in every] == ["successful"] * 5, proc.output()
    assert sorted(d.asset.url for d in every) == clips(origin, 0, 1, 2, 3, 4)  # no duplicates
    wait_for(lambda: check_finished(sub), timeout=30)
    sub.refresh_from_db()
    assert (sub.last_new, sub.last_requested, sub.last_left) == (2, 2, 0)
    assert Job.objects.filter(kind="subscriptions.check").count() == 2
