"""Subscriptions: checks against a real loopback feed read by real yt-dlp, the schedule, the pages.

A check runs here in the test process through the engine's own execution
path (run_handler and settle on a job this test holds the lease of); the
acceptance test runs it in real runworker children.
"""

import socket
import threading
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F
from django.test import Client
from django.utils import timezone

from downloads import services as downloads
from downloads.models import Download, DownloadQuota
from jobs.exceptions import IllegalTransition
from jobs.models import Job, JobStatus
from jobs.runtime import execution
from jobs.runtime.context import JobContext
from subscriptions import scheduled, services
from subscriptions.models import Entry, Outcome, Subscription
from subscriptions.services import check_key
from tests import media

pytestmark = pytest.mark.usefixtures("media_root")
HOUR_S = 3600


def publish(origin, count, *, extra_items=""):
    """Serve /feed.xml: an RSS feed of `count` MP4 entries (c0 … c<count-1>), newest last."""
    items = []
    for i in range(count):
        clip = origin.add_file(f"/c{i}.mp4", media.short_mp4())
        items.append(f"<item><title>Clip {i}</title><link>{clip}</link>"
                     f'<enclosure url="{clip}" type="video/mp4" length="1"/></item>')
    return origin.add_file("/feed.xml", (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>Feed</title>'
        f"<link>{origin.url('/')}</link>{''.join(items)}{extra_items}</channel></rss>").encode())


@pytest.fixture
def allowed(origin, settings):
    settings.DOWNLOADS_EGRESS_ALLOW = f"127.0.0.1:{origin.port}"
    return origin


def run_check(sub):
    """Take the subscription's queued check as a worker would, run it here and record its end."""
    job = Job.objects.get(unique_key=check_key(sub.pk), status=JobStatus.READY)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, lease_token=uuid.uuid4(),
                                         attempts=F("attempts") + 1, started_at=timezone.now())
    job.refresh_from_db()
    ctx = JobContext(job)
    outcome, value = execution.run_handler(job, ctx)
    execution.settle(job, ctx, outcome, value)
    job.refresh_from_db()
    sub.refresh_from_db()
    return job


def urls_requested(user):
    return sorted(Download.objects.filter(owner=user).values_list("asset__url", flat=True))


def clips(origin, *numbers):
    return sorted(origin.url(f"/c{i}.mp4") for i in numbers)


# --- Checks --------------------------------------------------------------------------

def test_the_first_check_takes_every_entry_and_later_ones_only_new_entries(allowed, user):
    origin = allowed
    feed = publish(origin, 3)
    sub = services.subscribe(user, feed, fmt="720p", interval_s=HOUR_S)
    job = run_check(sub)
    assert job.status == JobStatus.SUCCESSFUL, job.error
    assert job.result == {"listed": 3, "new": 3, "requested": 3, "refused": 0, "left": 0}
    assert urls_requested(user) == clips(origin, 0, 1, 2)
    assert set(Download.objects.filter(owner=user).values_list("asset__format", flat=True)) == {
        "720p"}
    assert sorted(Download.objects.values_list("name", flat=True)) == [
        "Clip 0", "Clip 1", "Clip 2"]
    assert (sub.last_outcome, sub.last_new, sub.last_requested, sub.last_left) == ("ok", 3, 3, 0)
    assert Entry.objects.filter(subscription=sub, download__isnull=False).count() == 3

    publish(origin, 5)
    services.check_now(sub)
    job = run_check(sub)
    assert job.result["requested"] == 2
    assert urls_requested(user) == clips(origin, 0, 1, 2, 3, 4)  # each once
    assert (sub.last_new, sub.last_requested) == (2, 2)

    services.check_now(sub)
    assert run_check(sub).result["requested"] == 0
    assert Download.objects.filter(owner=user).count() == 5
    assert sub.last_outcome == Outcome.OK and sub.last_new == 0


def test_entries_pointing_inside_the_network_are_never_requested(allowed, user, elsewhere):
    inside = ("<item><title>Inside</title><link>http://10.0.0.7/x.mp4</link>"
              '<enclosure url="http://10.0.0.7/x.mp4" type="video/mp4" length="1"/></item>'
              f"<item><title>Elsewhere</title><link>{elsewhere.url('/clip.mp4')}</link>"
              f'<enclosure url="{elsewhere.url("/clip.mp4")}" type="video/mp4" length="1"/>'
              "</item>")
    sub = services.subscribe(user, publish(allowed, 2, extra_items=inside), fmt="best",
                             interval_s=HOUR_S)
    assert run_check(sub).status == JobStatus.SUCCESSFUL
    assert urls_requested(user) == clips(allowed, 0, 1)
    assert elsewhere.saw_nothing()


def test_a_full_queue_leaves_the_rest_for_the_next_check(allowed, user, alice_client):
    DownloadQuota.objects.create(user=user, max_queued=2)
    sub = services.subscribe(user, publish(allowed, 3), fmt="best", interval_s=HOUR_S)
    job = run_check(sub)
    assert job.status == JobStatus.SUCCESSFUL
    assert job.result["left"] == 1
    assert urls_requested(user) == clips(allowed, 0, 1)
    assert Entry.objects.filter(subscription=sub).count() == 2  # the third is not remembered
    assert (sub.last_new, sub.last_requested, sub.last_left) == (3, 2, 1)
    page = alice_client.get("/subscriptions/").content.decode()
    assert "1 left for the next check: your download queue is full." in page

    services.check_now(sub)
    assert run_check(sub).result["requested"] == 0  # still full: nothing lost, nothing doubled
    for download in Download.objects.filter(owner=user):
        downloads.download_cancel(download)
    services.check_now(sub)
    job = run_check(sub)
    assert job.result == {"listed": 3, "new": 1, "requested": 1, "refused": 0, "left": 0}
    assert urls_requested(user) == clips(allowed, 0, 1, 2)
    assert "left for the next check" not in alice_client.get("/subscriptions/").content.decode()


def test_a_listing_refused_by_the_egress_policy_is_an_error_and_the_schedule_goes_on(
        allowed, user, elsewhere, alice_client, django_capture_on_commit_callbacks):
    # The address passes the check at subscribe time; where it leads is refused at connect time.
    feed = allowed.add_redirect("/feed.xml", elsewhere.url("/feed.xml"))
    sub = services.subscribe(user, feed, fmt="best", interval_s=HOUR_S)
    planned = sub.next_check_at
    with django_capture_on_commit_callbacks(execute=True):
        job = run_check(sub)
    assert job.status == JobStatus.FAILED
    assert job.error_code == "blocked_destination"
    assert job.attempts == 1  # refused for good: no retry
    assert elsewhere.saw_nothing()
    assert sub.last_outcome == Outcome.FAILED and sub.last_error_code == "blocked_destination"
    assert f"127.0.0.1:{elsewhere.port}" in sub.last_error
    assert not sub.paused and sub.next_check_at == planned
    assert Download.objects.count() == 0
    page = alice_client.get("/subscriptions/").content.decode()
    assert "is on a private or local network, so it was not read." in page

    Subscription.objects.filter(pk=sub.pk).update(next_check_at=timezone.now())
    assert scheduled.check_due() == 1  # the next check still happens


def test_an_unreachable_site_is_retried_and_shown(user, settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    settings.DOWNLOADS_EGRESS_ALLOW = f"127.0.0.1:{port}"
    settings.DOWNLOADS_SOCKET_TIMEOUT_S = 2
    sub = services.subscribe(user, f"http://127.0.0.1:{port}/feed.xml", fmt="best",
                             interval_s=HOUR_S)
    job = run_check(sub)
    assert job.status == JobStatus.READY and job.error_code == "network"  # retried later
    assert sub.last_outcome == Outcome.FAILED and sub.last_error_code == "network"
    assert not sub.paused


def test_a_check_of_a_subscription_removed_or_paused_meanwhile_requests_nothing(allowed, user):
    sub = services.subscribe(user, publish(allowed, 2), fmt="best", interval_s=HOUR_S)
    Subscription.objects.filter(pk=sub.pk).update(paused=True)  # as if paused once it started
    assert run_check(sub).result == {"skipped": "paused"}
    assert Download.objects.count() == 0


# --- The schedule -----------------------------------------------------------------------

def make(user, name, *, due, paused=False):
    now = timezone.now()
    return Subscription.objects.create(
        owner=user, url=f"https://example.com/{name}", url_digest=name, format="best",
        interval_s=HOUR_S, paused=paused,
        next_check_at=now - timedelta(minutes=1) if due else now + timedelta(minutes=30))


def test_check_due_enqueues_only_due_active_subscriptions_and_never_twice(user):
    due = [make(user, "a", due=True), make(user, "b", due=True)]
    make(user, "later", due=False)
    make(user, "paused", due=True, paused=True)
    assert scheduled.check_due() == 2
    assert scheduled.check_due() == 0
    jobs = Job.objects.filter(kind="subscriptions.check")
    assert sorted(j.payload["subscription"] for j in jobs) == sorted(str(s.pk) for s in due)
    for sub in due:
        sub.refresh_from_db()
        # The cadence holds: one interval after the planned time (a minute ago), not after now.
        assert timezone.now() + timedelta(minutes=58) < sub.next_check_at
        assert sub.next_check_at < timezone.now() + timedelta(minutes=59)
        assert sub.check_job.unique_key == check_key(sub.pk)

    # Due again while the first check is still queued: the round is skipped, not doubled.
    Subscription.objects.filter(pk=due[0].pk).update(next_check_at=timezone.now())
    assert scheduled.check_due() == 0
    assert Job.objects.filter(kind="subscriptions.check").count() == 2
    Job.objects.filter(unique_key=check_key(due[0].pk)).update(status=JobStatus.SUCCESSFUL)
    Subscription.objects.filter(pk=due[0].pk).update(next_check_at=timezone.now())
    assert scheduled.check_due() == 1


def test_a_missed_stretch_gives_one_check_not_a_burst(user):
    sub = make(user, "a", due=True)
    Subscription.objects.filter(pk=sub.pk).update(
        next_check_at=timezone.now() - timedelta(days=3))
    assert scheduled.check_due() == 1
    sub.refresh_from_db()
    assert sub.next_check_at > timezone.now() + timedelta(minutes=59)


@pytest.mark.django_db(transaction=True)
def test_schedulers_racing_enqueue_each_due_check_once():
    owner = get_user_model().objects.create_user("racer")
    subs = [make(owner, f"s{i}", due=True) for i in range(6)]
    counts, errors, barrier = [], [], threading.Barrier(4)

    def fire():
        try:
            barrier.wait()
            counts.append(scheduled.check_due())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=fire) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(counts) == len(subs)
    per_sub = Job.objects.filter(kind="subscriptions.check").values_list("unique_key", flat=True)
    assert sorted(per_sub) == sorted(check_key(s.pk) for s in subs)


# --- Services ---------------------------------------------------------------------------

HOSTILE = [
    "file:///etc/passwd",
    "ftp://example.com/feed",
    "http://127.0.0.1/feed.xml",
    "http://localhost:8000/feed.xml",
    "http://10.0.0.1/playlist",
    "http://[::1]/feed",
    "http://2130706433/feed",
    "http://user:secret@example.com/feed",
    "ytsearch10:cats",
    "--exec=touch /tmp/x",
    "https://example.com/a b",
    "javascript:alert(1)",
    "",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_addresses_are_refused_and_nothing_is_written(user, url):
    with pytest.raises(ValidationError):
        services.subscribe(user, url, fmt="best", interval_s=HOUR_S)
    assert not Subscription.objects.exists() and not Job.objects.exists()


def test_intervals_formats_and_duplicates_are_checked(user, settings):
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = 300
    settings.SUBSCRIPTIONS_MAX_INTERVAL_S = 86400
    url = "https://example.com/channel"
    for interval_s, code in [(299, "interval_short"), (86401, "interval_long"),
                             ("3600", "interval"), (True, "interval")]:
        with pytest.raises(ValidationError) as refused:
            services.subscribe(user, url, fmt="best", interval_s=interval_s)
        assert refused.value.code == code
    with pytest.raises(ValidationError):
        services.subscribe(user, url, fmt="4k", interval_s=HOUR_S)
    services.subscribe(user, url, fmt="best", interval_s=300)
    with pytest.raises(ValidationError) as refused:
        services.subscribe(user, "HTTPS://EXAMPLE.COM/channel#top", fmt="best", interval_s=HOUR_S)
    assert refused.value.code == "duplicate"
    services.subscribe(user, url, fmt="audio", interval_s=HOUR_S)  # another format is another
    assert Subscription.objects.count() == 2


def test_too_many_subscriptions_are_refused(user, settings):
    settings.SUBSCRIPTIONS_MAX_PER_USER = 1
    services.subscribe(user, "https://example.com/one", fmt="best", interval_s=HOUR_S)
    with pytest.raises(ValidationError) as refused:
        services.subscribe(user, "https://example.com/two", fmt="best", interval_s=HOUR_S)
    assert refused.value.code == "too_many"


def test_pause_cancels_the_queued_check_and_resume_keeps_the_schedule(user):
    sub = services.subscribe(user, "https://example.com/channel", fmt="best", interval_s=HOUR_S)
    first = sub.check_job
    assert first.status == JobStatus.READY and first.priority == services.ASKED_PRIORITY
    services.pause(sub)
    first.refresh_from_db()
    assert sub.paused and first.status == JobStatus.CANCELLED
    with pytest.raises(IllegalTransition):
        services.check_now(sub)
    Subscription.objects.filter(pk=sub.pk).update(next_check_at=timezone.now())
    assert scheduled.check_due() == 0  # paused: never due
    services.resume(sub)
    assert not sub.paused
    assert scheduled.check_due() == 1


def test_check_now_merges_into_the_live_check(user):
    sub = services.subscribe(user, "https://example.com/channel", fmt="best", interval_s=HOUR_S)
    again = services.check_now(sub)
    assert again.pk == sub.check_job_id
    assert Job.objects.filter(kind="subscriptions.check").count() == 1
    assert sub.next_check_at > timezone.now() + timedelta(minutes=59)


def test_removing_a_subscription_keeps_its_downloads(allowed, user):
    sub = services.subscribe(user, publish(allowed, 2), fmt="best", interval_s=HOUR_S)
    run_check(sub)
    made = set(Download.objects.values_list("pk", flat=True))
    services.check_now(sub)
    queued = Job.objects.get(unique_key=check_key(sub.pk), status=JobStatus.READY)
    services.remove(sub)
    assert not Subscription.objects.exists() and not Entry.objects.exists()
    assert set(Download.objects.values_list("pk", flat=True)) == made
    queued.refresh_from_db()
    assert queued.status == JobStatus.CANCELLED


def test_a_deleted_download_is_not_fetched_again(allowed, user, alice_client):
    sub = services.subscribe(user, publish(allowed, 2), fmt="best", interval_s=HOUR_S)
    run_check(sub)
    downloads.download_delete(Download.objects.filter(owner=user).first())
    services.check_now(sub)
    assert run_check(sub).result["requested"] == 0
    assert Download.objects.filter(owner=user).count() == 1
    detail = alice_client.get(f"/subscriptions/{sub.pk}/").content.decode()
    assert detail.count("Not downloaded (refused or deleted)") == 1
    assert detail.count("Queued") == 1


def test_an_engine_side_failure_is_recorded_on_the_subscription(user):
    sub = services.subscribe(user, "https://example.com/channel", fmt="best", interval_s=HOUR_S)
    job = sub.check_job
    job.status, job.error_code, job.error = JobStatus.FAILED, "stalled", "no progress for 180 s"
    services.record_job_failure(job)
    sub.refresh_from_db()
    assert (sub.last_outcome, sub.last_error_code) == (Outcome.FAILED, "stalled")
    assert not sub.paused


# --- Pages ------------------------------------------------------------------------------

def test_the_page_lists_the_users_subscriptions_with_their_last_check(allowed, user, other_user,
                                                                      alice_client):
    sub = services.subscribe(user, publish(allowed, 3), fmt="audio", interval_s=HOUR_S)
    services.subscribe(other_user, "https://example.com/bobs", fmt="best", interval_s=HOUR_S)
    page = alice_client.get("/subscriptions/").content.decode()
    assert "Checking…" in page and 'hx-trigger="every 2s"' in page  # polls while it checks
    assert "Not checked yet" in page
    run_check(sub)
    page = alice_client.get("/subscriptions/").content.decode()
    assert sub.url in page and "bobs" not in page
    assert "Audio only" in page and "Every 1 hour" in page
    assert "Found 3 new entries, requested 3 downloads." in page
    assert "Last check just now" in page and "Next check in 59\xa0minutes" in page
    assert 'hx-trigger="every 2s"' not in page  # idle rows do not poll
    for download in Download.objects.filter(owner=user):
        assert f'href="/downloads/{download.pk}/"' in page
    detail = alice_client.get(f"/subscriptions/{sub.pk}/").content.decode()
    assert detail.count('href="/downloads/') >= 3 and "Clip 2" in detail


def test_subscribing_through_the_form(alice_client, user):
    response = alice_client.post("/subscriptions/", {
        "url": "https://example.com/channel", "format": "best", "interval_s": "3600"})
    assert response.status_code == 302
    sub = Subscription.objects.get(owner=user)
    assert sub.interval_s == HOUR_S and sub.check_job.status == JobStatus.READY


@pytest.mark.parametrize("url", ["http://192.168.1.1/feed", "file:///etc/passwd"])
def test_the_form_refuses_a_hostile_address_with_its_reason(alice_client, url):
    response = alice_client.post("/subscriptions/", {"url": url, "format": "best",
                                                      "interval_s": "3600"})
    assert response.status_code == 400
    assert 'class="errorlist' in response.content.decode()
    assert not Subscription.objects.exists() and not Job.objects.exists()


def test_the_form_refuses_an_interval_it_does_not_offer(alice_client, settings):
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = 300
    response = alice_client.post("/subscriptions/", {
        "url": "https://example.com/channel", "format": "best", "interval_s": "10"})
    assert response.status_code == 400
    assert not Subscription.objects.exists()


def test_actions_are_posts_and_answer_the_row_to_htmx(alice_client, user):
    sub = services.subscribe(user, "https://example.com/channel", fmt="best", interval_s=HOUR_S)
    assert alice_client.get(f"/subscriptions/{sub.pk}/pause/").status_code == 405
    response = alice_client.post(f"/subscriptions/{sub.pk}/pause", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert 'data-state="paused"' in response.content.decode()
    assert "Resume" in response.content.decode()
    response = alice_client.post(f"/subscriptions/{sub.pk}/resume/")
    assert response.status_code == 302
    sub.refresh_from_db()
    assert not sub.paused
    assert alice_client.post(f"/subscriptions/{sub.pk}/delete/",
                             headers={"HX-Request": "true"}).content == b""
    assert not Subscription.objects.exists()


def test_actions_need_the_csrf_token(user):
    sub = services.subscribe(user, "https://example.com/channel", fmt="best", interval_s=HOUR_S)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(f"/subscriptions/{sub.pk}/pause/").status_code == 403
    assert client.post(f"/subscriptions/{sub.pk}/delete/").status_code == 403
    sub.refresh_from_db()
    assert not sub.paused


def test_another_users_subscription_is_404(alice_client, other_user):
    sub = services.subscribe(other_user, "https://example.com/bobs", fmt="best",
                             interval_s=HOUR_S)
    base = f"/subscriptions/{sub.pk}"
    assert alice_client.get(f"{base}/").status_code == 404
    assert alice_client.get(f"{base}/row/").status_code == 404
    for action in ("pause", "resume", "check", "delete"):
        assert alice_client.post(f"{base}/{action}/").status_code == 404
    assert alice_client.get("/subscriptions/not-an-id/").status_code == 404
    sub.refresh_from_db()
    assert not sub.paused


def test_the_page_needs_a_login(client):
    response = client.get("/subscriptions/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
