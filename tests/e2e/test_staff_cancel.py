"""Staff cancel a user's download from Up next in a real browser: they are asked first and give a
reason, and the user's own page then says who cancelled it and why."""

import pytest
from django.urls import reverse

from downloads import services
from jobs.models import Job, JobStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_confirm_a_cancel_with_a_reason_and_the_user_reads_it(
        live_server, page, browser, user, staff_user, log_in, media_root, screenshot):
    download = services.download_submit(owner=user, url="https://videos.example.com/long.mp4")
    log_in(page, staff_user)
    page.goto(f"{live_server.url}{reverse('admin:jobs_job_up_next')}?queue=downloads")
    page.click(f'#up-next tr[data-job="{download.job_id}"] button[data-action="cancel"]')

    page.wait_for_selector("#confirm-summary")
    assert f"#{download.job_id}" in page.inner_text("#confirm-summary")
    assert Job.objects.get(pk=download.job_id).status == JobStatus.READY  # only asked so far
    screenshot(page, "staff-cancel-confirmation")
    page.fill("input[name=reason]", "the origin is being moved")
    page.click("#confirm-action")
    page.wait_for_selector(".messagelist")
    assert "Cancelled 1 job" in page.inner_text(".messagelist")
    assert page.url.endswith("?queue=downloads")  # back where staff were
    assert Job.objects.get(pk=download.job_id).status == JobStatus.CANCELLED

    theirs = browser.new_context()
    try:
        mine = theirs.new_page()
        log_in(mine, user)
        mine.goto(f"{live_server.url}/downloads/")
        row = mine.locator(f"#download-{download.pk}")
        assert row.get_attribute("data-status") == "cancelled"
        assert "Cancelled by staff: the origin is being moved" in row.inner_text()
        screenshot(mine, "user-row-cancelled-by-staff")
    finally:
        theirs.close()
