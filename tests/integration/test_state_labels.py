"""One state, one word: a download, an insight and the job behind either are labelled alike on
every page and in the admin ("Successful", never "Finished" beside it)."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from downloads.models import DownloadStatus
from insights import services as insights
from insights.models import InsightKind, InsightStatus
from jobs.models import JobStatus
from tests.integration.test_downloads_pages import ready  # noqa: F401 - the fixture
from tests.integration.test_insights_api import finish

pytestmark = pytest.mark.usefixtures("media_root")

# The states every kind of job shares; a running one is named by what it does ("Downloading",
# "Generating"), and only a download can be evicted.
SHARED = ["READY", "PAUSED", "SUCCESSFUL", "FAILED", "CANCELLED"]


@pytest.mark.dbless
@pytest.mark.parametrize("state", SHARED)
def test_downloads_insights_and_jobs_share_their_labels(state):
    engine = JobStatus[state].label
    assert DownloadStatus[state].label == engine
    assert InsightStatus[state].label == engine


def test_a_successful_download_and_its_summary_read_successful_everywhere(
        alice_client, user, staff_user, ready, settings):  # noqa: F811
    settings.INSIGHTS_GATEWAY_URL = ""
    summary = insights.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY,
                                       subject=ready.asset_id)
    finish(summary)
    staff = Client()
    staff.force_login(staff_user)
    pages = {
        "downloads": alice_client.get("/downloads/"),
        "insights": alice_client.get("/insights/"),
        "queue": alice_client.get("/queue/"),
        "admin downloads": staff.get(reverse("admin:downloads_download_changelist")),
        "admin insights": staff.get(reverse("admin:insights_insight_changelist")),
        "admin job": staff.get(reverse("admin:jobs_job_change", args=[ready.job_id])),
    }
    for name, response in pages.items():
        text = re.sub(r"<[^>]+>", " ", response.content.decode())
        assert response.status_code == 200, name
        assert "Successful" in text, name
        assert not re.search(r"\bFinished\b(?!:)", text), name  # "Finished:" names a time
    # The rows themselves, not only the filters beside them, say it in words.
    assert '<td class="field-current_status">Successful</td>' in \
        pages["admin downloads"].content.decode()
    assert '<td class="field-status">Successful</td>' in pages["admin insights"].content.decode()
