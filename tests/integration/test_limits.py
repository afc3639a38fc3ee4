"""Concurrency limits: one rule (jobs.engine.limits.Slots) for enqueue, the claim and the pages."""

import pytest

from jobs import services
from jobs.engine import claiming, limits
from jobs.models import ConcurrencyLimit, Job, Worker
from jobs.selectors import standing as selectors

pytestmark = pytest.mark.django_db


def claim(limit=10):
    worker = Worker.objects.create(name=f"w{Worker.objects.count()}", host="h", pid=1)
    return claiming.claim(worker, queues=["default"], kinds=["tests.limited"], limit=limit)


def test_enqueue_creates_each_keys_limit_row_with_the_kinds_default():
    services.enqueue("tests.limited", {"keys": ["user:1", "asset:2"]})
    assert dict(ConcurrencyLimit.objects.values_list("key", "limit")) == {"asset:2": 1, "user:1": 1}


def test_enqueue_the_claim_and_the_page_agree_that_a_key_is_full():
    running = services.enqueue("tests.limited", {"keys": ["user:1"]})
    assert [j.pk for j in claim()] == [running.pk]
    waiting = services.enqueue("tests.limited", {"keys": ["user:1"]})
    # Enqueue parked it behind the full key...
    assert Job.objects.get(pk=waiting.pk).blocked_key == "user:1"
    # ...the claim does not take it...
    assert claim() == []
    # ...and its page says what it waits for.
    standing = selectors.standing(Job.objects.get(pk=waiting.pk), served_kinds={"tests.limited"})
    assert (standing.reason, standing.key) == ("key_busy", "user:1")


def test_a_key_without_a_limit_row_has_no_limit_anywhere():
    jobs = [services.enqueue("tests.limited", {"keys": ["user:7"]}) for _ in range(4)]
    # Staff deleted the row: the key is limited nowhere now, not "limit 1" in one place.
    ConcurrencyLimit.objects.filter(key="user:7").delete()
    assert limits.Slots(["user:7"]).free("user:7") is None
    assert limits.full_key(Job.objects.get(pk=jobs[-1].pk)) is None
    assert sorted(j.pk for j in claim()) == sorted(j.pk for j in jobs)
    standing = selectors.standing(services.enqueue("tests.noop", {}), served_kinds={"tests.noop"})
    assert standing.reason == "queued"
    # A new job of the key gives it a limit again: the kind's default.
    later = services.enqueue("tests.limited", {"keys": ["user:7"]})
    assert ConcurrencyLimit.objects.get(key="user:7").limit == 1
    assert Job.objects.get(pk=later.pk).blocked_key == "user:7"


def test_jobs_parked_behind_a_key_whose_row_went_away_are_all_unparked():
    services.enqueue("tests.limited", {"keys": ["user:8"]})
    claim()
    waiting = [services.enqueue("tests.limited", {"keys": ["user:8"]}) for _ in range(3)]
    assert Job.objects.filter(blocked_key="user:8").count() == 3
    ConcurrencyLimit.objects.filter(key="user:8").delete()
    limits.unpark_stranded()
    assert not Job.objects.filter(pk__in=[j.pk for j in waiting], blocked_key__isnull=False).exists()


def test_a_limit_of_zero_holds_every_job_of_the_key():
    services.set_limit("user:9", 0)
    job = services.enqueue("tests.limited", {"keys": ["user:9"]})
    assert Job.objects.get(pk=job.pk).blocked_key == "user:9"
    assert claim() == []
    services.set_limit("user:9", 1)
    assert [j.pk for j in claim()] == [job.pk]
