"""The insight API, the panel and the queue page: who sees what, what reads never do, the order."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.models import ApiToken
from insights import conf, services
from insights.models import Insight, InsightKind
from jobs import services as jobs
from jobs.models import Job, JobEvent, JobStatus, Queue
from tests.integration.test_insights import make_asset

pytestmark = pytest.mark.django_db

SUMMARY = InsightKind.VIDEO_SUMMARY
HTMX = {"HTTP_HX_REQUEST": "true"}
GATEWAY = "http://127.0.0.1:9/v1"  # configured, never called: no worker runs these tests' jobs


@pytest.fixture(autouse=True)
def insights_queue(db, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=20)


def post_json(client, url, body, **extra):
    return client.post(url, body, content_type="application/json", **extra)


# --- Requests ---------------------------------------------------------------------------


def test_post_requests_an_insight_idempotently_and_promotes_it(alice_client, user):
    asset = make_asset(user, "Lighthouse")
    first = post_json(alice_client, "/api/insights/",
                      {"kind": "video_summary", "subject": asset.pk, "priority": "prefetch"})
    assert first.status_code == 202
    body = first.json()
    assert (body["status"], body["priority"], body["kind"]) == ("ready", "prefetch", "video_summary")
    assert first["Location"] == f"/api/insights/{body['id']}/"

    again = post_json(alice_client, "/api/insights/",
                      {"kind": "video_summary", "subject": str(asset.pk), "priority": "interactive"})
    assert again.status_code == 202
    assert again.json()["id"] == body["id"] and again.json()["priority"] == "interactive"
    assert Job.objects.get().priority == conf.INTERACTIVE

    lower = post_json(alice_client, "/api/insights/",
                      {"kind": "video_summary", "subject": asset.pk, "priority": "prefetch"})
    assert lower.json()["priority"] == "interactive"
    assert Job.objects.count() == 1 and Insight.objects.count() == 1


@pytest.mark.parametrize("body,code", [
    ({"kind": "poem", "subject": "1"}, 400),
    ({"kind": "video_summary", "subject": "abc"}, 400),
    ({"kind": "video_summary", "subject": "1", "priority": "urgent"}, 400),
    ({"kind": "video_summary", "subject": ["1"]}, 400),
    ({"kind": "library_overview", "subject": "everything"}, 400),
    ({"kind": "video_summary", "subject": "999999"}, 404),
])
def test_bad_requests_are_refused_and_write_nothing(alice_client, body, code):
    response = post_json(alice_client, "/api/insights/", body)
    assert response.status_code == code
    assert response.json()["error"] and response.json()["error_code"]
    assert not Job.objects.exists() and not Insight.objects.exists()


def test_not_json_is_a_400(alice_client):
    response = alice_client.post("/api/insights/", "{", content_type="application/json")
    assert response.status_code == 400 and response.json()["error_code"] == "bad_json"


def test_a_finished_insight_answers_200_with_its_text(alice_client, user):
    asset = make_asset(user, "Done")
    insight = services.insight_request(owner=user, kind=SUMMARY, subject=asset.pk)
    finish(insight, text="A calm harbour.")
    response = post_json(alice_client, "/api/insights/", {"kind": "video_summary", "subject": asset.pk})
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["text"], body["generator"]) == ("successful", "A calm harbour.", "local")
    assert Job.objects.count() == 1


def finish(insight, *, text="Text.", status=JobStatus.SUCCESSFUL, error=""):
    """Stand in for a worker: the job reaches `status` and the insight records it."""
    from insights.data import fingerprint, provider

    insight = Insight.objects.get(pk=insight.pk)
    Job.objects.filter(pk=insight.job_id).update(status=status, finished_at=timezone.now(),
                                                 attempts=1, error=error,
                                                 error_code="gateway_refused" if error else "")
    if status == JobStatus.SUCCESSFUL:
        facts = provider(insight.kind).collect(insight.owner, insight.subject)
        Insight.objects.filter(pk=insight.pk).update(
            text=text, generator="local", model="haulage-local-1", generated_at=timezone.now(),
            fingerprint=fingerprint(facts, insight.language), status="successful")
    else:
        Insight.objects.filter(pk=insight.pk).update(status=status.lower(), error=error)


def test_status_shows_the_place_in_the_queue_while_queued(alice_client, user):
    ahead = [services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, f"A{i}").pk)
             for i in range(2)]
    mine = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "Mine").pk,
                                    tier="prefetch")
    body = alice_client.get(f"/api/insights/{mine.pk}/").json()
    assert body["status"] == "ready" and body["queue_position"] == 3
    assert body["waiting_code"] and body["waiting_reason"]
    assert body["text"] is None and body["error"] is None
    assert alice_client.get(f"/api/insights/{ahead[0].pk}/").json()["queue_position"] == 1


def test_a_failed_insight_shows_its_error(alice_client, user):
    insight = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "F").pk)
    finish(insight, status=JobStatus.FAILED, error="The AI gateway refused the request (HTTP 400): no")
    body = alice_client.get(f"/api/insights/{insight.pk}/").json()
    assert body["status"] == "failed" and "HTTP 400" in body["error"]
    assert body["error_code"] == "gateway_refused"


# --- Who sees what -------------------------------------------------------------------------


def test_other_users_insights_and_subjects_are_404(client, user, other_user):
    insight = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "Mine").pk)
    asset = Insight.objects.get(pk=insight.pk).subject
    client.force_login(other_user)
    assert client.get(f"/api/insights/{insight.pk}/").status_code == 404
    assert client.get(f"/insights/{insight.pk}/panel/").status_code == 404
    assert client.post(f"/insights/{insight.pk}/retry/").status_code == 404
    assert client.get("/api/insights/nonsense/").status_code == 404
    response = post_json(client, "/api/insights/", {"kind": "video_summary", "subject": asset})
    assert response.status_code == 404
    assert client.post("/insights/request/", {"kind": "video_summary", "subject": asset}).status_code == 404
    assert client.get("/api/insights/").json() == {"insights": []}
    assert client.get("/api/queue/").json()["jobs"] == []
    assert Insight.objects.filter(owner=other_user).count() == 0


def test_anonymous_api_calls_are_401_json_and_pages_redirect(client, user):
    insight = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "X").pk)
    for url in (f"/api/insights/{insight.pk}/", "/api/insights/", "/api/queue/"):
        response = client.get(url)
        assert response.status_code == 401 and response.json()["error_code"] == "unauthorized"
    assert client.post("/api/insights/retry-failed/").status_code == 401
    assert client.get("/queue/").status_code == 302


def test_a_bearer_token_works_and_a_session_post_needs_its_csrf_token(user):
    asset = make_asset(user, "Token")
    _token, raw = ApiToken.issue(user=user, name="script")
    response = Client().post("/api/insights/", {"kind": "video_summary", "subject": asset.pk},
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 202
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    refused = strict.post("/api/insights/", {"kind": "video_summary", "subject": asset.pk},
                          content_type="application/json")
    assert refused.status_code == 403
    assert strict.post("/insights/request/", {"kind": "video_summary", "subject": asset.pk}).status_code == 403


# --- Reads never write ----------------------------------------------------------------------


def snapshot():
    return (list(Job.objects.order_by("pk").values()), list(Insight.objects.order_by("pk").values()),
            JobEvent.objects.count(), list(Queue.objects.order_by("name").values()))


def test_get_storms_on_status_panel_and_queue_change_nothing(alice_client, user):
    queued = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "Q").pk)
    done = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "D").pk)
    failed = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "F").pk)
    finish(done)
    finish(failed, status=JobStatus.FAILED, error="boom")
    urls = [f"/api/insights/{i.pk}/" for i in (queued, done, failed)]
    urls += [f"/insights/{i.pk}/panel/" for i in (queued, done, failed)]
    urls += ["/api/insights/", "/api/queue/", "/queue/", "/queue/rows/", "/insights/"]
    alice_client.get("/queue/")  # the session is read once before counting
    before = snapshot()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(20):
            for url in urls:
                assert alice_client.get(url).status_code == 200, url
    writes = [q["sql"] for q in queries.captured_queries
              if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
    assert writes == []
    assert snapshot() == before
    assert alice_client.get("/insights/request/").status_code == 405  # asking is a POST


# --- Pages -------------------------------------------------------------------------------


def test_the_panel_posts_on_load_then_polls_until_the_insight_is_final(alice_client, user):
    asset = make_asset(user, "Panel")
    page = alice_client.get("/insights/")
    assert b'hx-post="/insights/request/"' in page.content and b'hx-trigger="load"' in page.content

    response = alice_client.post("/insights/request/", {"kind": "video_summary", "subject": asset.pk},
                                 **HTMX)
    assert response.status_code == 200
    insight = Insight.objects.get(owner=user, kind=SUMMARY)
    assert f'hx-get="/insights/{insight.pk}/panel/"'.encode() in response.content
    assert b"Queued" in response.content

    finish(insight, text="The harbour, slowly.")
    final = alice_client.get(f"/insights/{insight.pk}/panel/")
    assert b"The harbour, slowly." in final.content
    assert b'/panel/"' not in final.content  # it stopped polling
    assert b"Generated locally" in final.content


def test_the_panel_offers_retry_for_a_failed_insight(alice_client, user):
    insight = services.insight_request(owner=user, kind=SUMMARY, subject=make_asset(user, "R").pk)
    finish(insight, status=JobStatus.FAILED, error="The gateway said no")
    panel = alice_client.get(f"/insights/{insight.pk}/panel/")
    assert b"The gateway said no" in panel.content and b"Retry now" in panel.content
    retried = alice_client.post(f"/insights/{insight.pk}/retry/", **HTMX)
    assert retried.status_code == 200 and b'/panel/"' in retried.content  # polling again
    job = Job.objects.get(pk=insight.job_id)
    assert (job.status, job.attempts) == (JobStatus.READY, 0)


def test_the_queue_lists_jobs_in_worker_order_with_the_settings_in_force(alice_client, user,
                                                                          other_user, settings):
    settings.INSIGHTS_GATEWAY_URL = GATEWAY  # the queue shown is the gateway's, with its gap
    now = timezone.now()
    low = jobs.enqueue("tests.noop", {"n": "low"}, owner=user, priority=0)
    high = jobs.enqueue("tests.noop", {"n": "high"}, owner=user, priority=10)
    later = jobs.enqueue("tests.noop", {"n": "later"}, owner=user, priority=0)
    running = jobs.enqueue("tests.noop", {"n": "running"}, owner=user)
    failed = jobs.enqueue("tests.noop", {"n": "failed"}, owner=user)
    done = jobs.enqueue("tests.noop", {"n": "done"}, owner=user)
    jobs.enqueue("tests.noop", {"n": "theirs"}, owner=other_user)
    Job.objects.filter(pk=later.pk).update(enqueued_at=now + timedelta(seconds=1))
    Job.objects.filter(pk=running.pk).update(status=JobStatus.RUNNING, started_at=now, attempts=1)
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED, finished_at=now, attempts=3,
                                            max_attempts=3, error="it broke")
    Job.objects.filter(pk=done.pk).update(status=JobStatus.SUCCESSFUL, finished_at=now, attempts=1)

    body = alice_client.get("/api/queue/").json()
    order = [j["id"] for j in body["jobs"]]
    expected = [running, high, low, later, failed, done]
    assert order == [str(j.public_id) for j in expected]
    assert [j["status"] for j in body["jobs"]] == ["running", "ready", "ready", "ready", "failed",
                                                    "successful"]
    # Places are in the whole queue: bob's job, older than "later", is ahead of it.
    assert [j["queue_position"] for j in body["jobs"][1:4]] == [1, 2, 4]
    assert body["jobs"][4]["error"] == "it broke" and body["jobs"][4]["attempts"] == 3
    insights_queue = next(q for q in body["queues"] if q["queue"] == "insights")
    assert insights_queue == {"queue": "insights", "paused": False, "concurrency": 1,
                              "gap_seconds": 20.0, "max_attempts": [3], "cooldown_seconds": [1800.0]}

    page = alice_client.get("/queue/").content.decode()
    positions = [page.index(f'data-job="{j.public_id}"') for j in expected]
    assert positions == sorted(positions)
    assert "theirs" not in page and "it broke" in page
    assert "20 seconds" in page and "30 minutes" in page


def test_staff_edits_to_the_queue_show_on_the_page(alice_client, user, settings):
    settings.INSIGHTS_GATEWAY_URL = GATEWAY
    jobs.set_queue(conf.QUEUE, concurrency=2, gap_seconds=5)
    body = alice_client.get("/api/queue/").json()
    insights_queue = next(q for q in body["queues"] if q["queue"] == "insights")
    assert (insights_queue["concurrency"], insights_queue["gap_seconds"]) == (2, 5.0)


def test_without_a_gateway_the_page_shows_the_local_generators_queue_without_limits(alice_client):
    """The local generator's insights skip the gateway's single slot and gap."""
    body = alice_client.get("/api/queue/").json()
    local = next(q for q in body["queues"] if q["queue"] == conf.LOCAL_QUEUE)
    assert (local["concurrency"], local["gap_seconds"]) == (None, 0.0)
