"""The admin as the queue's control room: who may see and do what, and what each action does."""

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from jobs import services
from jobs.admin import jobs as jobs_admin
from jobs.engine import claiming
from jobs.models import ConcurrencyLimit, Job, JobEvent, JobStatus, Queue, Worker

pytestmark = pytest.mark.django_db

UP_NEXT = reverse("admin:jobs_job_up_next")
QUEUES = reverse("admin:jobs_job_queues")
WORKERS = reverse("admin:jobs_job_workers")
CHANGELIST = reverse("admin:jobs_job_changelist")
XSS = "<script>alert(1)</script>"


def act(job, action):
    return reverse("admin:jobs_job_act", args=[job.pk, action])


def live_worker(**fields):
    defaults = {"name": "w", "host": "h", "pid": 1, "queues": ["default"],
                "kinds": ["tests.noop", "tests.echo", "tests.limited", "tests.sleep_for"]}
    return Worker.objects.create(**{**defaults, **fields})


def set_status(job, status, **fields):
    Job.objects.filter(pk=job.pk).update(status=status, **fields)
    return Job.objects.get(pk=job.pk)


def up_next_ids(client, queue="default"):
    body = client.get(UP_NEXT, {"queue": queue}).content.decode()
    section = body.split('id="up-next"', 1)[1] if 'id="up-next"' in body else ""
    return [int(pk) for pk in re.findall(r'data-job="(\d+)" data-number', section)]


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def viewer(client, django_user_model):
    """Staff with view permission only: the read-only role."""
    user = django_user_model.objects.create_user("viewer", password="view-only-pass-5", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="jobs", codename__startswith="view_"))
    client.force_login(user)
    return client


# --- Who gets in --------------------------------------------------------------------


def test_anonymous_and_non_staff_users_are_sent_to_log_in(client, user):
    job = services.enqueue("tests.noop", {})
    pages = [UP_NEXT, QUEUES, WORKERS, CHANGELIST, reverse("admin:jobs_job_change", args=[job.pk])]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 302 and "login" in response["Location"], url
    client.force_login(user)
    for url in pages:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    assert client.post(act(job, "cancel")).status_code == 302
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY


def test_read_only_staff_see_the_queue_but_no_actions(viewer):
    live_worker(name="reader-visible")
    ready = services.enqueue("tests.noop", {})
    failed = set_status(services.enqueue("tests.noop", {}), JobStatus.FAILED)
    body = viewer.get(UP_NEXT).content.decode()
    assert f'data-job="{ready.pk}"' in body
    assert "data-action" not in body
    body = viewer.get(CHANGELIST).content.decode()
    assert f">{failed.pk}<" in body
    assert 'name="action"' not in body and "Retry failed jobs matching" not in body
    body = viewer.get(reverse("admin:jobs_job_change", args=[ready.pk])).content.decode()
    assert "Nothing you may do to this job" in body and "data-action" not in body
    body = viewer.get(QUEUES).content.decode()
    assert 'data-queue="default"' in body and "data-action" not in body
    body = viewer.get(WORKERS).content.decode()
    assert "reader-visible" in body and "data-action" not in body
    for url in [act(ready, "move_to_front"), act(ready, "cancel"), act(failed, "retry"),
                reverse("admin:jobs_job_queue_operation", args=["default", "pause"]),
                reverse("admin:jobs_job_worker_command", args=[Worker.objects.get().pk, "stop"]),
                reverse("admin:jobs_job_retry_failed")]:
        assert viewer.post(url).status_code == 403, url
    assert viewer.post(CHANGELIST, {"action": "retry", "_selected_action": [failed.pk],
                                    "index": 0}).status_code in (200, 302)
    assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
    assert not Queue.objects.filter(paused=True).exists()
    assert Worker.objects.get().command == ""


def test_actions_are_post_only_and_need_the_csrf_token(staff_user):
    job = services.enqueue("tests.noop", {})
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    assert client.get(act(job, "cancel")).status_code == 405
    assert client.post(act(job, "cancel")).status_code == 403
    assert client.post(reverse("admin:jobs_job_queue_operation", args=["default", "pause"])
                       ).status_code == 403
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    assert not Queue.objects.filter(paused=True).exists()


def test_titles_and_error_messages_are_escaped_everywhere(staff):
    worker = live_worker(name=XSS)
    job = services.enqueue("tests.noop", {"title": XSS}, queue=XSS)
    set_status(job, JobStatus.FAILED, error=XSS, error_code="x", phase=XSS, progress=0.5,
               progress_message=XSS, worker=worker, finished_at=timezone.now(),
               errors=[{"attempt": 1, "code": "x", "message": XSS, "traceback": XSS, "at": XSS}])
    running = services.enqueue("tests.noop", {}, queue=XSS)
    set_status(running, JobStatus.RUNNING, worker=worker, phase=XSS, progress_message=XSS)
    waiting = services.enqueue("tests.noop", {}, queue=XSS)
    services.cancel(waiting, reason=XSS, actor=None)
    services.retry(waiting, reason=XSS)
    pages = [CHANGELIST, f"{CHANGELIST}?status__exact=FAILED", UP_NEXT + "?queue=%3Cscript%3E",
             f"{UP_NEXT}?queue={XSS}", QUEUES, WORKERS,
             reverse("admin:jobs_job_change", args=[job.pk]),
             reverse("admin:jobs_job_change", args=[waiting.pk]),
             reverse("admin:jobs_job_retry_failed")]
    for url in pages:
        body = staff.get(url).content.decode()
        assert XSS not in body, url
    body = staff.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    response = staff.post(CHANGELIST, {"action": "retry", "_selected_action": [job.pk, waiting.pk],
                                       "index": 0})
    assert XSS not in response.content.decode()


# --- Up next --------------------------------------------------------------------------


def test_up_next_numbers_the_queue_and_says_why_each_job_waits(staff):
    worker = live_worker()
    holder = services.enqueue("tests.limited", {"keys": ["user:1"]})
    claiming.claim(worker, queues=["default"], kinds=["tests.limited"], limit=1)
    parked = services.enqueue("tests.limited", {"keys": ["user:1"]})
    later = services.enqueue("tests.noop", {}, run_after=timezone.now() + timedelta(hours=2))
    first = services.enqueue("tests.noop", {}, priority=5)
    body = staff.get(UP_NEXT).content.decode()
    assert up_next_ids(staff) == [first.pk, parked.pk, later.pk]
    reasons = re.findall(r'data-reason="(\w+)"', body)
    assert reasons == ["queued", "key_busy", "scheduled"]
    assert "Up next: 3 queued jobs" in body
    running_section = body.split('id="running"')[1].split("</table>")[0]
    assert f'data-job="{holder.pk}"' in running_section
    Queue.objects.create(name="default", paused=True)
    body = staff.get(UP_NEXT).content.decode()
    assert "This queue is paused" in body
    assert re.findall(r'data-reason="(\w+)"', body)[0] == "queue_paused"


def test_up_next_pages_continue_the_numbering(staff, monkeypatch):
    from jobs.admin import views as admin_views

    monkeypatch.setattr(admin_views, "PER_PAGE", 2)
    jobs = [services.enqueue("tests.noop", {}, priority=p) for p in (0, 3, 1, 2, 0)]
    seen = []
    for page in (1, 2, 3):
        body = staff.get(UP_NEXT, {"queue": "default", "page": page}).content.decode()
        seen += [(int(n), int(pk)) for pk, n in re.findall(r'data-job="(\d+)" data-number="(\d+)"',
                                                           body)]
    order = list(Job.objects.filter(status=JobStatus.READY).in_claim_order().values_list("pk", flat=True))
    assert seen == list(enumerate(order, start=1))
    assert len(order) == len(jobs)


def test_move_to_front_from_up_next_is_recorded_and_returns_to_the_page(staff, staff_user):
    jobs = [services.enqueue("tests.noop", {}) for _ in range(3)]
    page = f"{UP_NEXT}?queue=default"
    response = staff.post(act(jobs[2], "move_to_front"), {"next": page, "reason": "customer waiting"})
    assert response.status_code == 302 and response["Location"] == page
    assert up_next_ids(staff) == [jobs[2].pk, jobs[0].pk, jobs[1].pk]
    event = JobEvent.objects.get(job=jobs[2])
    assert (event.kind, event.actor, event.reason) == ("moved", staff_user, "customer waiting")
    staff.post(act(jobs[0], "move_down"))
    assert up_next_ids(staff) == [jobs[2].pk, jobs[1].pk, jobs[0].pk]
    staff.post(act(jobs[0], "move_up"))
    assert up_next_ids(staff) == [jobs[2].pk, jobs[0].pk, jobs[1].pk]
    response = staff.post(act(jobs[2], "move_up"), {"next": "https://evil.example/"})
    assert response["Location"] == reverse("admin:jobs_job_change", args=[jobs[2].pk])
    messages = [str(m) for m in response.wsgi_request._messages]
    assert messages == ["Moved 0 jobs up. Skipped 1 job: its state does not allow it, or it is "
                        "already there."]


def test_live_refresh_polls_a_partial_and_each_refresh_asks_the_toggle_and_the_tab(staff):
    services.enqueue("tests.noop", {})
    for url in (UP_NEXT, WORKERS, QUEUES):
        page = staff.get(url).content.decode()
        assert 'id="live-refresh"' in page and "htmx" in page
        # Where each refresh is stopped: the toggle, a hidden tab, a form being filled in.
        guard = page[page.index('"htmx:beforeRequest"'):]
        assert "box.checked" in guard and "visibilityState" in guard and "#live-region form" in guard
        partial = staff.get(url, headers={"HX-Request": "true"}).content.decode()
        assert "<html" not in partial and partial.lstrip().startswith("<div")
        assert re.search(r'hx-trigger="([^"]+)"', partial)[1] == "every 5s"


# --- Actions in bulk, from the list -------------------------------------------------------


def test_bulk_retry_asks_first_then_counts_what_changed_and_what_was_skipped(staff, staff_user):
    failed = [set_status(services.enqueue("tests.noop", {}), JobStatus.FAILED, attempts=3)
              for _ in range(3)]
    done = set_status(services.enqueue("tests.noop", {}), JobStatus.SUCCESSFUL)
    selected = [j.pk for j in failed] + [done.pk]
    response = staff.post(CHANGELIST, {"action": "retry", "_selected_action": selected, "index": 0})
    assert response.status_code == 200
    assert "3 of the 4 selected jobs can be changed" in response.content.decode()
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3  # nothing yet
    response = staff.post(CHANGELIST, {"action": "retry", "_selected_action": selected,
                                       "select_across": "0", "confirm": "yes",
                                       "reason": "fixed the gateway"}, follow=True)
    assert "Retried 3 jobs. Skipped 1 job: its state does not allow it" in response.content.decode()
    assert set(Job.objects.filter(status=JobStatus.READY).values_list("pk", flat=True)) == {
        j.pk for j in failed}
    assert Job.objects.get(pk=failed[0].pk).attempts == 0
    assert JobEvent.objects.filter(kind="retried", actor=staff_user, reason="fixed the gateway"
                                   ).count() == 3


def test_one_selected_job_is_acted_on_at_once(staff):
    job = services.enqueue("tests.noop", {})
    response = staff.post(CHANGELIST, {"action": "pause", "_selected_action": [job.pk], "index": 0})
    assert response.status_code == 302
    assert Job.objects.get(pk=job.pk).status == JobStatus.PAUSED
    staff.post(CHANGELIST, {"action": "resume", "_selected_action": [job.pk], "index": 0})
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    assert list(JobEvent.objects.values_list("kind", flat=True)) == ["paused", "resumed"]


def test_a_priority_tier_is_always_chosen_on_the_confirmation_page(staff):
    jobs = [services.enqueue("tests.noop", {}) for _ in range(2)]
    Job.objects.filter(pk=jobs[0].pk).update(position=-3)
    data = {"action": "set_priority_tier", "_selected_action": [jobs[0].pk], "index": 0}
    response = staff.post(CHANGELIST, data)
    assert response.status_code == 200 and 'name="priority"' in response.content.decode()
    del data["index"]
    response = staff.post(CHANGELIST, {**data, "confirm": "yes", "priority": ""})
    assert response.status_code == 200  # asked again: no tier chosen
    staff.post(CHANGELIST, {**data, "confirm": "yes", "priority": "50"})
    row = Job.objects.get(pk=jobs[0].pk)
    assert (row.priority, row.position) == (50, 0)
    assert staff.post(CHANGELIST, {**data, "confirm": "yes", "priority": "51"}).status_code == 200
    assert Job.objects.get(pk=jobs[0].pk).priority == 50


def test_cancel_is_immediate_for_queued_jobs_and_a_stop_request_for_running_ones(staff):
    queued = services.enqueue("tests.noop", {})
    running = set_status(services.enqueue("tests.noop", {}), JobStatus.RUNNING)
    done = set_status(services.enqueue("tests.noop", {}), JobStatus.SUCCESSFUL)
    staff.post(CHANGELIST, {"action": "cancel", "_selected_action": [queued.pk, running.pk, done.pk],
                            "select_across": "0", "confirm": "yes"})
    assert Job.objects.get(pk=queued.pk).status == JobStatus.CANCELLED
    row = Job.objects.get(pk=running.pk)
    assert (row.status, row.stop_requested) == (JobStatus.RUNNING, "cancelled")
    assert Job.objects.get(pk=done.pk).status == JobStatus.SUCCESSFUL


def test_retry_every_failed_job_matching_the_lists_filter(staff):
    match = [set_status(services.enqueue("tests.noop", {}), JobStatus.FAILED) for _ in range(2)]
    other_kind = set_status(services.enqueue("tests.echo", {}), JobStatus.FAILED)
    cancelled = set_status(services.enqueue("tests.noop", {}), JobStatus.CANCELLED)
    url = reverse("admin:jobs_job_retry_failed") + "?kind=tests.noop"
    body = staff.get(url).content.decode()
    assert "2 failed jobs match the list&#x27;s filters" in body or "2 failed jobs match" in body
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3
    # The form posts back what it named: the count and the last id it covered.
    confirmed = {"count": "2", "up_to": str(max(j.pk for j in match))}
    assert all(f'name="{k}" value="{v}"' in body for k, v in confirmed.items())
    response = staff.post(url, {"reason": "after the fix", **confirmed})
    assert response.status_code == 302 and response["Location"] == f"{CHANGELIST}?kind=tests.noop"
    assert {j.pk for j in Job.objects.filter(status=JobStatus.READY)} == {j.pk for j in match}
    assert Job.objects.get(pk=other_kind.pk).status == JobStatus.FAILED
    assert Job.objects.get(pk=cancelled.pk).status == JobStatus.CANCELLED
    assert "Retry failed jobs matching this filter" in staff.get(CHANGELIST).content.decode()


def test_jobs_cannot_be_edited_added_or_bulk_deleted(staff):
    job = services.enqueue("tests.noop", {})
    assert staff.get(reverse("admin:jobs_job_add")).status_code == 403
    response = staff.post(reverse("admin:jobs_job_change", args=[job.pk]), {"status": "SUCCESSFUL"})
    assert response.status_code == 403
    assert staff.get(reverse("admin:jobs_job_delete", args=[job.pk])).status_code == 403
    assert "delete_selected" not in staff.get(CHANGELIST).content.decode()
    done = set_status(services.enqueue("tests.noop", {}), JobStatus.SUCCESSFUL)
    assert staff.get(reverse("admin:jobs_job_delete", args=[done.pk])).status_code == 200


# --- The job's page -------------------------------------------------------------------------


def test_the_job_page_shows_everything_with_secrets_redacted(staff, staff_user, other_user):
    jobs_admin.register_job_link("tests.", lambda job: job.owner)
    try:
        payload = {"url": "https://example.com/v", "api_key": "k-123",
                   "nested": [{"Authorization": "Bearer abc", "depth": {"cookie": "c=1", "ok": 7}}],
                   "Password": "hunter2", "session_token": "t-9"}
        job = services.enqueue("tests.fail_value_error", payload, owner=other_user)
        services.pause(job, actor=staff_user, reason="checking the source")
        services.resume(job, actor=staff_user)
        set_status(job, JobStatus.FAILED, attempts=2, error="ValueError: bad value",
                   started_at=timezone.now() - timedelta(seconds=30), finished_at=timezone.now(),
                   errors=[{"attempt": 2, "code": "error", "message": "ValueError: bad value",
                            "exception_class_path": "builtins.ValueError", "at": "2026-01-01",
                            "traceback": 'Traceback (most recent call last):\n  raise ValueError("bad value")'}])
        body = staff.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    finally:
        jobs_admin._job_links.pop("tests.", None)
    for secret in ("k-123", "Bearer abc", "c=1", "hunter2", "t-9"):
        assert secret not in body
    assert "[redacted]" in body and "https://example.com/v" in body and "&quot;ok&quot;: 7" in body
    user_url = reverse("admin:auth_user_change", args=[other_user.pk])
    assert body.count(f'href="{user_url}"') >= 2  # the owner, and the linked object
    timeline = body.split('id="timeline"')[1]
    assert "checking the source" in timeline and staff_user.username in timeline
    assert "raise ValueError(&quot;bad value&quot;)" in body
    assert 'data-action="retry"' in body and 'data-action="cancel"' not in body
    assert "ran: 30 s" in body


def test_a_button_on_the_job_page_acts_with_a_reason(staff, staff_user):
    job = set_status(services.enqueue("tests.noop", {}), JobStatus.FAILED)
    response = staff.post(act(job, "retry"), {"reason": "one more go"})
    assert response["Location"] == reverse("admin:jobs_job_change", args=[job.pk])
    assert Job.objects.get(pk=job.pk).status == JobStatus.READY
    assert JobEvent.objects.get(job=job).reason == "one more go"
    staff.post(act(job, "set_priority_tier"), {"priority": "-10"})
    assert Job.objects.get(pk=job.pk).priority == -10
    staff.post(act(job, "set_priority_tier"), {"priority": "7"})
    assert Job.objects.get(pk=job.pk).priority == -10
    assert staff.post(act(job, "explode")).status_code == 403


# --- Queues, workers, limits -------------------------------------------------------------------


def test_the_queues_page_counts_and_steers_each_queue(staff, staff_user):
    services.enqueue("tests.noop", {})
    set_status(services.enqueue("tests.noop", {}), JobStatus.FAILED)
    services.enqueue("tests.other_queue", {})
    live_worker(queues=["default", "other"])
    body = staff.get(QUEUES).content.decode()
    row = body.split('data-queue="default"')[1].split("</tr>")[0]
    cells = re.findall(r"<td>([^<]*)</td>", row)
    assert cells[:6] == ["1", "0", "0", "0", "1", "0"]  # queued, running, paused, successful, failed, cancelled
    staff.post(reverse("admin:jobs_job_queue_operation", args=["default", "pause"]))
    assert Queue.objects.get(name="default").paused
    staff.post(reverse("admin:jobs_job_queue_operation", args=["default", "limits"]),
               {"default-concurrency": "2", "default-gap_seconds": "1.5"})
    row = Queue.objects.get(name="default")
    assert (row.paused, row.concurrency, row.gap_seconds) == (True, 2, 1.5)
    staff.post(reverse("admin:jobs_job_queue_operation", args=["default", "limits"]),
               {"default-concurrency": "", "default-gap_seconds": "-1"})
    assert Queue.objects.get(name="default").gap_seconds == 1.5
    staff.post(reverse("admin:jobs_job_queue_operation", args=["default", "resume"]))
    assert not Queue.objects.get(name="default").paused
    assert LogEntry.objects.filter(user=staff_user, object_repr="default").count() == 3


def test_the_workers_page_shows_heartbeats_and_jobs_and_sends_commands(staff, staff_user):
    worker = live_worker(name="box:12", heartbeat_at=timezone.now() - timedelta(seconds=300))
    stopped = live_worker(name="box:9", stopped_at=timezone.now())
    job = set_status(services.enqueue("tests.noop", {}), JobStatus.RUNNING, worker=worker)
    body = staff.get(WORKERS).content.decode()
    row = body.split(f'data-worker="{worker.pk}"')[1].split("</tr>")[0]
    assert 'class="late"' in row and f"#{job.pk}" in row and 'data-action="quiet"' in row
    stopped_row = body.split(f'data-worker="{stopped.pk}"')[1].split("</tr>")[0]
    assert "data-action" not in stopped_row
    staff.post(reverse("admin:jobs_job_worker_command", args=[worker.pk, "quiet"]))
    assert Worker.objects.get(pk=worker.pk).command == "quiet"
    staff.post(reverse("admin:jobs_job_worker_command", args=[worker.pk, "stop"]))
    assert Worker.objects.get(pk=worker.pk).command == "stop"
    staff.post(reverse("admin:jobs_job_worker_command", args=[stopped.pk, "stop"]))
    assert Worker.objects.get(pk=stopped.pk).command == ""
    assert LogEntry.objects.filter(user=staff_user, object_repr="box:12").count() == 2


def test_changing_a_limit_in_the_admin_unparks_waiting_jobs(staff):
    worker = live_worker()
    services.enqueue("tests.limited", {"keys": ["user:7"]})
    claiming.claim(worker, queues=["default"], kinds=["tests.limited"], limit=1)
    parked = services.enqueue("tests.limited", {"keys": ["user:7"]})
    assert Job.objects.get(pk=parked.pk).blocked_key == "user:7"
    url = reverse("admin:jobs_concurrencylimit_change", args=["user:7"])
    response = staff.post(url, {"limit": "2"})
    assert response.status_code == 302
    assert ConcurrencyLimit.objects.get(key="user:7").limit == 2
    assert Job.objects.get(pk=parked.pk).blocked_key is None
    assert staff.get(reverse("admin:jobs_concurrencylimit_delete", args=["user:7"])).status_code == 403


def test_editing_a_queue_in_its_admin_goes_through_the_service(staff, monkeypatch):
    calls = []
    monkeypatch.setattr(jobs_admin.services, "set_queue",
                        lambda name, **changes: calls.append((name, changes)))
    response = staff.post(reverse("admin:jobs_queue_add"),
                          {"name": "gateway", "paused": "on", "concurrency": "1", "gap_seconds": "2"})
    assert response.status_code == 302
    assert calls == [("gateway", {"paused": True, "concurrency": 1, "gap_seconds": 2.0})]
