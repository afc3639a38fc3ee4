"""The subscriptions admin: listed with filters, changed only through the services."""

import pytest

from jobs.models import JobStatus
from subscriptions import services
from subscriptions.models import Subscription

HOUR_S = 3600


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def subs(user):
    return [services.subscribe(user, f"https://example.com/{name}", fmt="best",
                               interval_s=HOUR_S) for name in ("one", "two")]


def test_the_list_shows_and_filters_subscriptions(staff_client, subs):
    services.pause(subs[1])
    page = staff_client.get("/admin/subscriptions/subscription/").content.decode()
    assert "https://example.com/one" in page and "https://example.com/two" in page
    paused = staff_client.get("/admin/subscriptions/subscription/?paused__exact=1")
    assert "https://example.com/two" in paused.content.decode()
    assert "https://example.com/one" not in paused.content.decode()
    assert staff_client.get(f"/admin/subscriptions/subscription/{subs[0].pk}/change/"
                            ).status_code == 200
    assert staff_client.get("/admin/subscriptions/subscription/add/").status_code == 403


def test_actions_go_through_the_services(staff_client, subs):
    ids = [str(s.pk) for s in subs]
    staff_client.post("/admin/subscriptions/subscription/",
                      {"action": "pause", "_selected_action": ids})
    assert set(Subscription.objects.values_list("paused", flat=True)) == {True}
    for sub in subs:
        sub.check_job.refresh_from_db()
        assert sub.check_job.status == JobStatus.CANCELLED  # as the page's pause does
    staff_client.post("/admin/subscriptions/subscription/",
                      {"action": "resume", "_selected_action": ids})
    staff_client.post("/admin/subscriptions/subscription/",
                      {"action": "check_now", "_selected_action": ids})
    for sub in Subscription.objects.select_related("check_job"):
        assert not sub.paused and sub.check_job.status == JobStatus.READY


def test_users_cannot_reach_the_admin(alice_client, subs):
    response = alice_client.get("/admin/subscriptions/subscription/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
