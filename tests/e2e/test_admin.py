"""The queue's control room in a real browser: reorder, bulk retry, read-only staff, outsiders."""

import threading

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from jobs import services
from jobs.admin import views as admin_views
from jobs.models import Job, JobEvent, JobStatus
from tests.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

UP_NEXT = reverse("admin:jobs_job_up_next")


def log_in(page, live_server, user):
    """Give the browser a session for `user` (the login form itself is tested elsewhere)."""
    client = Client()
    client.force_login(user)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])




def status(job):
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


@pytest.fixture
def viewer(django_user_model):
    user = django_user_model.objects.create_user("viewer", password="view-only-pass-5", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="jobs", codename__startswith="view_"))
    return user


def test_staff_moves_a_job_to_the_front_and_the_running_worker_takes_it_next(
    live_server, page, staff_user, fast_engine
):
    from jobs.runtime.worker import Worker

    slow = services.enqueue("tests.sleep_for", {"seconds": 60})
    worker = Worker(queues=["default"], concurrency=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: status(slow) == JobStatus.RUNNING)
        waiting = [services.enqueue("tests.echo", {"i": i}) for i in range(4)]
        log_in(page, live_server, staff_user)
        page.goto(f"{live_server.url}{UP_NEXT}?queue=default")
        assert page.locator("#up-next tbody tr").first.get_attribute("data-job") == str(waiting[0].pk)
        page.click(f'#up-next tr[data-job="{waiting[3].pk}"] button[data-action="move_to_front"]')
        page.wait_for_selector(".messagelist")
        assert "Moved 1 job to the front." in page.inner_text(".messagelist")
        numbers = page.locator("#up-next tbody tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.number, r.dataset.job])")
        assert numbers[0] == ["1", str(waiting[3].pk)]
        # Free the worker's only slot: the slow job stops at its next check.
        page.click(f'#running tr[data-job="{slow.pk}"] button[data-action="cancel"]')
        page.click("#confirm-action")  # a cancel discards work: staff confirm it first
        assert wait_until(lambda: all(status(j) == JobStatus.SUCCESSFUL for j in waiting))
    finally:
        worker.request_stop()
        thread.join(15)
    assert status(slow) == JobStatus.CANCELLED
    started = list(Job.objects.filter(pk__in=[j.pk for j in waiting]).order_by("started_at")
                   .values_list("pk", flat=True))
    assert started == [waiting[3].pk, waiting[0].pk, waiting[1].pk, waiting[2].pk]
    assert JobEvent.objects.get(job=waiting[3], kind="moved").actor == staff_user


def test_bulk_retry_of_failed_jobs_with_confirmation(live_server, page, staff_user):
    failed = [services.enqueue("tests.noop", {"i": i}) for i in range(3)]
    Job.objects.filter(pk__in=[j.pk for j in failed]).update(status=JobStatus.FAILED, attempts=1,
                                                             error="ValueError: bad value")
    done = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=done.pk).update(status=JobStatus.SUCCESSFUL)
    log_in(page, live_server, staff_user)
    page.goto(f"{live_server.url}{reverse('admin:jobs_job_changelist')}?status__exact=FAILED")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "retry")
    page.click("button[name=index]")
    page.wait_for_selector("#confirm-summary")
    assert "3 of the 3 selected jobs can be changed" in page.inner_text("#confirm-summary")
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3  # not before confirming
    page.fill("input[name=reason]", "the gateway is back")
    page.click("#confirm-action")
    page.wait_for_selector(".messagelist")
    assert "Retried 3 jobs." in page.inner_text(".messagelist")
    assert set(Job.objects.filter(status=JobStatus.READY).values_list("pk", flat=True)) == {
        j.pk for j in failed}
    assert status(done) == JobStatus.SUCCESSFUL
    assert JobEvent.objects.filter(kind="retried", actor=staff_user,
                                   reason="the gateway is back").count() == 3


def test_read_only_staff_see_the_queue_but_have_no_actions(live_server, page, viewer):
    jobs = [services.enqueue("tests.noop", {}) for _ in range(2)]
    failed = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
    log_in(page, live_server, viewer)
    page.goto(f"{live_server.url}{UP_NEXT}?queue=default")
    rows = page.locator("#up-next tbody tr")
    assert rows.count() == 2 and rows.first.get_attribute("data-job") == str(jobs[0].pk)
    assert page.locator("[data-action]").count() == 0
    page.goto(f"{live_server.url}{reverse('admin:jobs_job_changelist')}")
    assert page.locator("#result_list").is_visible()
    assert page.locator("select[name=action]").count() == 0
    page.goto(f"{live_server.url}{reverse('admin:jobs_job_change', args=[failed.pk])}")
    assert page.locator("#job-actions button").count() == 0
    page.goto(f"{live_server.url}{reverse('admin:jobs_job_queues')}")
    assert page.locator("#queues form").count() == 0


def test_a_user_who_is_not_staff_is_sent_to_log_in(live_server, page, django_user_model):
    django_user_model.objects.create_user("dora", password="explorer-pass-1")
    page.goto(f"{live_server.url}{UP_NEXT}")
    assert "/accounts/login/" in page.url  # anonymous: the site's login
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "explorer-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"**{reverse('admin:login')}**")
    assert "You are authenticated as dora" in page.inner_text("#content")
    assert page.locator("#up-next").count() == 0


def test_live_refresh_shows_new_jobs_without_a_reload(live_server, page, staff_user, monkeypatch):
    monkeypatch.setattr(admin_views, "REFRESH_S", 1)
    log_in(page, live_server, staff_user)
    page.goto(f"{live_server.url}{UP_NEXT}?queue=default")
    assert page.locator("#up-next").count() == 0
    page.check("#live-refresh")
    job = services.enqueue("tests.noop", {})
    page.wait_for_selector(f'#up-next tr[data-job="{job.pk}"]', timeout=10_000)
    # Each refresh is held on its way until released below.
    held, refreshes = [], f"**{UP_NEXT}?queue=default"
    page.route(refreshes, lambda route: held.append(route) if route.request.headers.get("hx-request")
               else route.continue_())
    page.reload()  # the choice is remembered
    assert page.is_checked("#live-refresh")
    page.wait_for_function("() => document.querySelector('#live-region.htmx-request')")
    # Turned off while a refresh is on its way: that refresh is dropped, and none follows.
    page.uncheck("#live-refresh")
    later = services.enqueue("tests.noop", {})
    for route in held:
        route.continue_()
    page.unroute(refreshes)
    page.wait_for_timeout(2500)
    assert page.locator(f'#up-next tr[data-job="{later.pk}"]').count() == 0
    assert page.locator(f'#up-next tr[data-job="{job.pk}"]').count() == 1
    # On again, in a tab nobody looks at: nothing is fetched until it is shown.
    page.evaluate("Object.defineProperty(document, 'visibilityState', "
                  "{value: 'hidden', configurable: true})")
    page.check("#live-refresh")
    page.wait_for_timeout(2500)
    assert page.locator(f'#up-next tr[data-job="{later.pk}"]').count() == 0
    page.evaluate("delete document.visibilityState")
    page.wait_for_selector(f'#up-next tr[data-job="{later.pk}"]', timeout=10_000)
    # Someone about to press one of a row's buttons: the rows stay put until they leave it.
    page.focus(f'#up-next tr[data-job="{job.pk}"] button[data-action]')
    third = services.enqueue("tests.noop", {})
    page.wait_for_timeout(2500)
    assert page.locator(f'#up-next tr[data-job="{third.pk}"]').count() == 0
    page.evaluate("document.activeElement.blur()")
    page.wait_for_selector(f'#up-next tr[data-job="{third.pk}"]', timeout=10_000)
