"""Rate limits per key: at most N starts in any window of a period, decided inside the claim."""

import threading
import time

import pytest
from django.db import connection

from jobs import bounds, services
from jobs.engine import claiming, limits
from jobs.models import Job, JobStatus, RateLimit, Worker
from jobs.selectors import standing as selectors
from tests.waiting import wait_for

KIND = "tests.rated"  # 3 starts a second per rate key (tests/handlers.py)


def worker_row(name):
    return Worker.objects.create(name=name, host="h", pid=1)


def claim(worker, limit=10):
    return claiming.claim(worker, queues=["default"], kinds=[KIND], limit=limit)


def window_empty(key):
    """Whether the key's window holds no start now (by the database's clock, as the claim sees it)."""
    return not limits.Rates([key], lock=False).window[key]


def started_within(starts, period):
    """The most starts that fall in any window of `period` seconds."""
    starts = sorted(starts)
    return max((sum(1 for t in starts[i:] if t < start + period) for i, start in enumerate(starts)),
               default=0)


def together(workers):
    """Every worker claims at once, released by a barrier; (jobs taken, errors)."""
    barrier = threading.Barrier(len(workers))
    taken, errors = [], []

    def take(worker):
        try:
            barrier.wait()
            taken.extend(claim(worker))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return taken, errors


@pytest.mark.django_db(transaction=True)
def test_two_claimers_released_together_never_start_more_than_the_rate_in_a_window():
    services.set_rate("burst", 3, 1.0)
    for n in range(40):
        services.enqueue(KIND, {"rate_key": "burst", "n": n})
    workers = [worker_row("a"), worker_row("b")]
    rounds, starts = [], []
    for _round in range(10):
        taken, errors = together(workers)
        assert not errors
        rounds.append(len(taken))
        starts.extend(RateLimit.objects.get(key="burst").starts)
        # What the worker's timer does when the window opens.
        wait_for(lambda: window_empty("burst"), timeout=5)
        limits.unpark_due_rates()
    # Each round the window had room for three: both claimers together took
    # exactly three (never more, and the opened window was used at once).
    assert rounds == [3] * 10
    assert len(starts) == 30
    assert started_within(starts, 1.0) <= 3
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 30


@pytest.mark.django_db(transaction=True)
def test_a_window_that_opens_is_used_at_once_by_a_worker(run_worker):
    services.set_rate("opens", 3, 1.0)
    jobs = [services.enqueue(KIND, {"rate_key": "opens", "n": n}) for n in range(7)]
    run_worker(timeout=30, concurrency=10)
    done = Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("started_at")
    assert {job.status for job in done} == {JobStatus.SUCCESSFUL}
    started = [job.started_at.timestamp() for job in done]
    # Three in the first window, three when it opens, the last after that: the
    # worker itself unparked them as each window opened (a burst worker would
    # otherwise have exited with jobs left). The window is kept by the clock the
    # claim reads when it decides; started_at is stamped by its UPDATE a little
    # later, tens of milliseconds on a loaded machine, hence the narrower window.
    assert started_within(started, 0.9) <= 3
    assert started[-1] - started[0] >= 1.9  # three windows, so no limit was skipped


@pytest.mark.django_db(transaction=True)
def test_rate_limited_jobs_do_not_block_other_keys():
    services.set_rate("busy", 1, 60.0)
    held = [services.enqueue(KIND, {"rate_key": "busy", "n": n}) for n in range(20)]
    others = [services.enqueue(KIND, {"rate_key": f"quiet{n}"}) for n in range(5)]
    worker = worker_row("w")
    first = claim(worker, limit=3)
    taken = {job.pk for job in first} | {job.pk for job in claim(worker, limit=10)}
    # One of the busy key's (its window allows one a minute) and every other key's job.
    assert taken == {held[0].pk, *(job.pk for job in others)}
    waiting = Job.objects.filter(pk__in=[job.pk for job in held[1:]])
    assert {job.blocked_key for job in waiting} == {"@rate:busy"}  # out of the claim index
    assert first.rate_opens_in_s is not None and 0 < first.rate_opens_in_s <= 60


@pytest.mark.django_db(transaction=True)
def test_a_held_job_says_when_it_starts_next_and_staff_raising_the_limit_lets_it_go():
    services.set_rate("page", 1, 3600.0)
    services.enqueue(KIND, {"rate_key": "page"})
    waiting = services.enqueue(KIND, {"rate_key": "page"})
    assert len(claim(worker_row("w"))) == 1
    waiting.refresh_from_db()
    standing = selectors.standing(waiting, served_kinds={KIND})
    assert standing.reason == "rate_limited"
    assert standing.message.startswith("rate limit: next start at ")
    assert standing.until is not None and standing.until.timestamp() > time.time() + 3000
    services.set_rate("page", 2, 3600.0)  # staff, live
    waiting.refresh_from_db()
    assert waiting.blocked_key is None
    assert [job.pk for job in claim(worker_row("w2"))] == [waiting.pk]


@pytest.mark.django_db(transaction=True)
def test_jobs_parked_for_a_rate_whose_row_says_nothing_are_unparked_by_the_safety_net():
    services.set_rate("lost", 1, 3600.0)
    services.enqueue(KIND, {"rate_key": "lost"})
    waiting = services.enqueue(KIND, {"rate_key": "lost"})
    claim(worker_row("w"))
    RateLimit.objects.filter(key="lost").delete()  # by hand: no limit any more
    limits.unpark_due_rates()
    waiting.refresh_from_db()
    assert waiting.blocked_key is None


def test_a_kind_without_a_rate_key_in_its_payload_uses_its_name(db):
    job = services.enqueue(KIND, {})
    assert job.rate_key == KIND
    assert (RateLimit.objects.get(key=KIND).limit, RateLimit.objects.get(key=KIND).period_seconds) \
        == (3, 1.0)
    assert services.enqueue("tests.noop", {}).rate_key == ""


@pytest.mark.parametrize(("text", "parsed"), [
    ("10/m", (10, 60.0)), ("3/10s", (3, 10.0)), ("100/h", (100, 3600.0)), (" 6 / m ", (6, 60.0)),
    ("1/0.5s", (1, 0.5)),
])
def test_rates_parse(text, parsed):
    assert bounds.parse_rate(text) == parsed


@pytest.mark.parametrize(("text", "says"), [
    ("", "like “10/m”"), ("10", "like “10/m”"), ("10/d", "like “10/m”"), ("ten/m", "like “10/m”"),
    ("0/m", "from 1 to"), ("10/0s", "period"), ("-1/m", "like “10/m”"), (None, "like “10/m”"),
    ("99999999/s", "from 1 to"), ("1/9999h", "period"),
])
def test_a_bad_rate_is_refused_with_a_sentence(text, says):
    with pytest.raises(ValueError, match=says):
        bounds.parse_rate(text)


@pytest.mark.django_db(transaction=True)
def test_staff_edit_a_rate_live_in_the_admin(admin_client):
    services.set_rate("edited", 1, 3600.0)
    services.enqueue(KIND, {"rate_key": "edited"})
    waiting = services.enqueue(KIND, {"rate_key": "edited"})
    claim(worker_row("w"))
    response = admin_client.post("/admin/jobs/ratelimit/edited/change/",
                                 {"limit": 5, "period_seconds": 60})
    assert response.status_code == 302, response.content
    row = RateLimit.objects.get(key="edited")
    assert (row.limit, row.period_seconds) == (5, 60.0)
    waiting.refresh_from_db()
    assert waiting.blocked_key is None  # the new room was taken at once
    bad = admin_client.post("/admin/jobs/ratelimit/edited/change/",
                            {"limit": 0, "period_seconds": -1})
    assert bad.status_code == 200 and RateLimit.objects.get(key="edited").limit == 5


@pytest.mark.django_db(transaction=True)
def test_a_rate_row_edited_into_nonsense_is_read_as_the_nearest_sane_one():
    services.set_rate("odd", 1, 3600.0)
    RateLimit.objects.filter(key="odd").update(starts={"not": "a list"}, limit=0,
                                               period_seconds=-5)
    jobs = [services.enqueue(KIND, {"rate_key": "odd"}) for _ in range(3)]
    taken = claim(worker_row("w"))
    assert [job.pk for job in taken] == [jobs[0].pk]  # a limit of 0 reads as 1; nobody fails
    limits.unpark_due_rates()  # the safety net reads it too
