"""The video page's summary panel through each state the user can meet, as the page polls it:
queued behind others ("N ahead of it"), generating, the text, and the error with its retry; and
asked again when the video's shots arrive while the page is open."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from downloads import shots
from downloads.models import Shot
from insights import conf
from insights import services as insights
from insights.models import Insight, InsightKind
from jobs import services as jobs
from jobs.models import Job, JobStatus, Queue, Worker
from tests.integration.test_downloads_pages import ready  # noqa: F401 - the fixture
from tests.integration.test_insights import make_asset
from tests.integration.test_insights_api import finish

pytestmark = pytest.mark.usefixtures("media_root")
HTMX = {"HTTP_HX_REQUEST": "true"}
SUMMARY = InsightKind.VIDEO_SUMMARY


@pytest.fixture(autouse=True)
def insights_queue(db, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)


@pytest.fixture
def worker(db):
    """A live worker that makes summaries: without one the panel says none is running."""
    return Worker.objects.create(name="summaries", host="here", pid=1, queues=[conf.QUEUE],
                                 kinds=["insights.video_summary"], concurrency=1)


def ask_from_the_page(client, download):
    """The POST the video page fires on load: returns the panel's HTML."""
    response = client.post("/insights/request/", {"kind": "video_summary",
                                                  "subject": download.asset_id}, **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def poll(client, insight):
    """One of the panel's own polls."""
    return client.get(f"/insights/{insight.pk}/panel/", **HTMX).content.decode()


def polls(html):
    """Whether the panel asks for itself again (how soon: see test_the_panel_looks_again_soon…)."""
    return re.search(r'hx-get="/insights/[0-9a-f-]+/panel/"', html) is not None


def test_queued_generating_text_failure_and_retry_as_the_panel_shows_them(
        alice_client, user, ready):  # noqa: F811
    # Two summaries of other videos were asked for first, at the same tier.
    for title in ("First", "Second"):
        insights.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, title).pk)
    panel = ask_from_the_page(alice_client, ready)
    assert "Queued — 2 ahead of it." in panel and polls(panel)
    insight = Insight.objects.get(owner=user, kind=SUMMARY, subject=str(ready.asset_id))

    Job.objects.filter(kind="insights.video_summary").exclude(pk=insight.job_id).delete()
    assert "Queued — next in line." in poll(alice_client, insight)

    Job.objects.filter(pk=insight.job_id).update(status=JobStatus.RUNNING,
                                                 started_at=timezone.now(), attempts=1)
    panel = poll(alice_client, insight)
    assert "Generating…" in panel and "Queued" not in panel and polls(panel)

    finish(insight, status=JobStatus.FAILED, error="The gateway did not answer.")
    panel = poll(alice_client, insight)
    assert "The gateway did not answer." in panel and "Retry now" in panel
    assert not polls(panel)  # final: htmx stops asking

    retried = alice_client.post(f"/insights/{insight.pk}/retry/", **HTMX).content.decode()
    assert "Queued — next in line." in retried and polls(retried)

    finish(insight, text="Clip, in one breath.")
    panel = poll(alice_client, insight)
    assert "Clip, in one breath." in panel and "Generated locally" in panel
    assert "Retry now" not in panel and not polls(panel)


def test_the_shots_partial_says_when_new_shots_arrived(alice_client, user, ready):  # noqa: F811
    segment = shots.asset_segment(ready.asset, owner=user, check_transport=False)
    running = alice_client.get(f"/downloads/{ready.pk}/shots/", **HTMX)
    assert 'hx-trigger="every 2s"' in running.content.decode()
    assert "HX-Trigger" not in running  # nothing new yet

    Shot.objects.bulk_create(Shot(asset=ready.asset, index=i, start_s=i * 1.0, end_s=i + 1.0)
                             for i in range(2))
    Job.objects.filter(pk=segment.pk).update(status=JobStatus.SUCCESSFUL,
                                             finished_at=timezone.now())
    done = alice_client.get(f"/downloads/{ready.pk}/shots/", **HTMX)
    assert 'hx-trigger="every 2s"' not in done.content.decode()
    assert done["HX-Trigger"] == "insight-data-changed"


def test_new_shots_make_the_open_summary_ask_again_at_interactive_priority(
        alice_client, user, ready):  # noqa: F811
    ask_from_the_page(alice_client, ready)
    insight = Insight.objects.get(owner=user, kind=SUMMARY, subject=str(ready.asset_id))
    finish(insight, text="Clip, before its shots were known.")
    panel = poll(alice_client, insight)
    assert not polls(panel)

    # The panel listens for the page's word that its data changed, and then sends the same
    # request as on load (kind and subject of this very insight).
    refresh = re.search(r'<form class="insight-refresh".*?</form>', panel, re.S).group(0)
    assert 'hx-post="/insights/request/"' in refresh
    assert 'hx-trigger="insight-data-changed from:body"' in refresh
    assert 'name="kind" value="video_summary"' in refresh
    assert f'name="subject" value="{ready.asset_id}"' in refresh

    # The shots arrive; the background has queued the summary again, at prefetch priority.
    Shot.objects.bulk_create(Shot(asset=ready.asset, index=i, start_s=i * 1.0, end_s=i + 1.0)
                             for i in range(2))
    insights.insights_prefetch(user, asset_id=ready.asset_id)
    assert Job.objects.filter(kind="insights.video_summary").latest("id").priority == conf.PREFETCH

    panel = ask_from_the_page(alice_client, ready)  # what the refresh form sends
    assert polls(panel) and "Clip, before its shots were known." in panel  # kept while it updates
    job = Job.objects.filter(kind="insights.video_summary").latest("id")
    assert job.status == JobStatus.READY and job.priority == conf.INTERACTIVE  # promoted


def trigger(html):
    return re.search(r'<div class="insight[^>]*hx-trigger="([^"]+)"', html).group(1)


def test_the_panel_looks_again_soon_when_the_text_is_a_moment_away(alice_client, user, ready,  # noqa: F811
                                                                    worker, settings):
    first = insights.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "A").pk)
    panel = ask_from_the_page(alice_client, ready)
    assert "Queued — 1 ahead of it." in panel and trigger(panel) == "every 1s"

    Job.objects.filter(pk=first.job_id).delete()  # now next in line, nothing holding it
    insight = Insight.objects.get(owner=user, kind=SUMMARY, subject=str(ready.asset_id))
    assert trigger(poll(alice_client, insight)) == "load delay:250ms, every 1s"

    Job.objects.filter(pk=insight.job_id).update(status=JobStatus.RUNNING, attempts=1,
                                                 started_at=timezone.now())
    assert trigger(poll(alice_client, insight)) == "load delay:250ms, every 1s"  # the local generator
    settings.INSIGHTS_GATEWAY_URL = "http://gateway.invalid/v1"
    assert trigger(poll(alice_client, insight)) == "every 1s"  # a gateway takes its time


def test_a_job_claimed_while_its_panel_is_answered_reads_as_started_not_held_by_itself(
        user, ready, worker, settings):  # noqa: F811
    from insights import selectors

    settings.INSIGHTS_GATEWAY_URL = "http://127.0.0.1:9/v1"  # the gateway's one slot and gap
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=20)
    asked = insights.insight_request(owner=user, kind=SUMMARY, subject=ready.asset_id)
    read = Insight.objects.select_related("job").get(pk=asked.pk)  # the page's read: queued
    # Then a worker takes it: the queue's one slot is its own.
    Job.objects.filter(pk=read.job_id).update(status=JobStatus.RUNNING, attempts=1,
                                              started_at=timezone.now())
    state = selectors.insight_state(read)
    assert state.status == "running" and state.waiting_code == ""

    # Or it has already run: the rest after its start is its own.
    read = Insight.objects.select_related("job").get(pk=asked.pk)
    Job.objects.filter(pk=read.job_id).update(status=JobStatus.READY)
    read = Insight.objects.select_related("job").get(pk=asked.pk)
    finish(read, text="Written meanwhile.")
    Queue.objects.filter(name=conf.QUEUE).update(rests_until=timezone.now() + timedelta(seconds=20))
    state = selectors.insight_state(read)
    assert state.status == "successful" and state.text == "Written meanwhile."
