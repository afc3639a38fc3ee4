"""Staff cancel downloads from the Downloads list in the admin as they do jobs from Up next: asked
first, with an optional reason, which each owner then reads on their own row."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import reverse

from downloads import services
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.usefixtures("media_root")
CHANGELIST = reverse("admin:downloads_download_changelist")


@pytest.fixture
def staff(staff_user):
    client = Client()
    client.force_login(staff_user)
    return client


def test_a_bulk_cancel_asks_first_then_each_owner_reads_the_reason(staff, alice_client, user,
                                                                   other_user):
    mine = services.download_submit(owner=user, url="https://videos.example.com/a.mp4")
    theirs = services.download_submit(owner=other_user, url="https://videos.example.com/b.mp4")
    chosen = {"action": "cancel_downloads", ACTION_CHECKBOX_NAME: [mine.pk, theirs.pk]}

    asked = staff.post(CHANGELIST, chosen)
    assert asked.status_code == 200
    page = asked.content.decode()
    assert 'id="confirm-action"' in page and 'name="reason"' in page
    assert "a.mp4" in page and "b.mp4" in page  # what would be cancelled
    assert Job.objects.filter(status=JobStatus.CANCELLED).count() == 0  # only asked so far

    done = staff.post(CHANGELIST, {**chosen, "confirm": "yes", "reason": "the origin is moving"})
    assert done.status_code == 302
    assert Job.objects.filter(status=JobStatus.CANCELLED).count() == 2
    row = alice_client.get(f"/downloads/{mine.pk}/row/").content.decode()
    assert "Cancelled by staff: the origin is moving" in row


def test_going_back_cancels_nothing(staff, user):
    download = services.download_submit(owner=user, url="https://videos.example.com/c.mp4")
    page = staff.post(CHANGELIST, {"action": "cancel_downloads",
                                   ACTION_CHECKBOX_NAME: [download.pk]}).content.decode()
    assert f'href="{CHANGELIST}"' in page  # "No, take me back" leads to the list, not a POST
    assert Job.objects.get(pk=download.job_id).status == JobStatus.READY


def test_a_reason_too_long_is_said_on_the_confirmation_and_nothing_is_cancelled(staff, user):
    download = services.download_submit(owner=user, url="https://videos.example.com/d.mp4")
    answer = staff.post(CHANGELIST, {"action": "cancel_downloads", "confirm": "yes",
                                     ACTION_CHECKBOX_NAME: [download.pk], "reason": "x" * 501})
    assert answer.status_code == 200 and 'name="reason"' in answer.content.decode()
    assert Job.objects.get(pk=download.job_id).status == JobStatus.READY
