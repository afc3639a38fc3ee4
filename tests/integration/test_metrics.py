"""/metrics: Prometheus' text format, read from the tables at scrape time."""

import json
from datetime import timedelta

import pytest
from django.conf import settings as configured
from django.db import connection
from django.test import RequestFactory, override_settings
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from jobs import metrics, services
from jobs.engine import queries, rollup
from jobs.models import Job, JobStatus, Worker
from jobs.selectors import counts

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.urls_metrics")]


def scrape(client, **headers):
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    return families


def samples(family, suffix=""):
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples
            if s.name == family.name + suffix}


COUNTED = {JobStatus.SUCCESSFUL: "succeeded", JobStatus.FAILED: "failed"}


def finished(kind, status, *, seconds, ago_s=10):
    """A job that finished `ago_s` ago after running `seconds`, counted in the rollup as the
    engine's transition counts it."""
    job = services.enqueue(kind, {})
    end = timezone.now() - timedelta(seconds=ago_s)
    Job.objects.filter(pk=job.pk).update(status=status, started_at=end - timedelta(seconds=seconds),
                                         finished_at=end, attempts=1)
    rollup.count([(job, COUNTED[status], seconds)], now=end)
    return job


def test_the_scrape_parses_and_says_what_the_queue_holds(client):
    now = timezone.now()
    waiting = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=waiting.pk).update(run_after=now - timedelta(seconds=90))
    services.enqueue("tests.other_queue", {})
    services.enqueue("tests.noop", {}, run_after=now + timedelta(hours=1))  # scheduled: no latency
    running = services.enqueue("tests.echo", {})
    Job.objects.filter(pk=running.pk).update(status=JobStatus.RUNNING, started_at=now)
    finished("tests.echo", JobStatus.SUCCESSFUL, seconds=3)
    finished("tests.echo", JobStatus.SUCCESSFUL, seconds=120)
    failed = finished("tests.fail_value_error", JobStatus.FAILED, seconds=0.5)
    finished("tests.echo", JobStatus.SUCCESSFUL, seconds=3, ago_s=7200)  # outside the window
    rollup.count([(failed, "retried", None)], now=now - timedelta(seconds=10))
    Worker.objects.create(name="w1", host="box", pid=7,
                          heartbeat_at=now - timedelta(seconds=42))
    Worker.objects.create(name="gone", host="box", pid=8, stopped_at=now)

    families = scrape(client)

    jobs = samples(families["haulage_jobs"])
    assert jobs[(("queue", "default"), ("state", "ready"))] == 2
    assert jobs[(("queue", "default"), ("state", "running"))] == 1
    assert jobs[(("queue", "default"), ("state", "successful"))] == 3
    assert jobs[(("queue", "default"), ("state", "failed"))] == 1
    assert jobs[(("queue", "other"), ("state", "ready"))] == 1

    latency = samples(families["haulage_queue_latency_seconds"])
    assert 90 <= latency[(("queue", "default"),)] < 120
    assert latency[(("queue", "other"),)] < 30

    ages = samples(families["haulage_worker_heartbeat_age_seconds"])
    assert list(ages) == [(("host", "box"), ("worker", "w1"))]
    assert 42 <= ages[(("host", "box"), ("worker", "w1"))] < 60

    histogram = families["haulage_job_duration_seconds"]
    assert histogram.type == "histogram"
    buckets = samples(histogram, "_bucket")
    assert buckets[(("kind", "tests.echo"), ("le", "5.0"))] == 1
    assert buckets[(("kind", "tests.echo"), ("le", "300.0"))] == 2
    assert buckets[(("kind", "tests.echo"), ("le", "+Inf"))] == 2
    assert buckets[(("kind", "tests.fail_value_error"), ("le", "1.0"))] == 1
    finished_jobs = samples(families["haulage_recent_jobs_finished"])
    assert finished_jobs[(("kind", "tests.echo"), ("outcome", "succeeded"), ("queue", "default"))] == 2
    assert finished_jobs[(("kind", "tests.fail_value_error"), ("outcome", "failed"),
                          ("queue", "default"))] == 1
    sums = samples(families["haulage_job_duration_seconds_gsum"])
    assert sums[(("kind", "tests.echo"),)] == pytest.approx(123, abs=0.01)

    claims = samples(families["haulage_recent_job_claims"])
    assert claims == {(("kind", "tests.echo"),): 3, (("kind", "tests.fail_value_error"),): 1}
    assert samples(families["haulage_recent_job_failures"]) == {
        (("kind", "tests.fail_value_error"),): 1}
    assert samples(families["haulage_recent_job_retries"]) == {
        (("kind", "tests.fail_value_error"),): 1}
    assert samples(families["haulage_recent_window_seconds"]) == {(): 600}


def test_each_queues_latency_is_its_longest_wait_among_the_jobs_a_worker_could_take_now():
    now = timezone.now()

    def waiting(queue, seconds, **fields):
        job = services.enqueue("tests.noop", {}, queue=queue)
        Job.objects.filter(pk=job.pk).update(run_after=now - timedelta(seconds=seconds), **fields)

    waiting("a", 30)
    waiting("a", 90)
    waiting("a", 600, blocked_key="user:1")  # parked behind its key: waits by design
    waiting("b", -3600)  # scheduled for later: not waiting yet
    waiting("c", 900, status=JobStatus.RUNNING)
    waiting("d", 5)
    waiting("d", -60)
    latencies = counts.queue_latencies(now)
    assert set(latencies) == {"a", "d"}
    assert latencies["a"] == pytest.approx(90, abs=1)
    assert latencies["d"] == pytest.approx(5, abs=1)


@pytest.mark.postgres
def test_the_latency_read_probes_each_queue_once_through_its_index_however_many_jobs_wait():
    services.enqueue_many([("tests.noop", {}, {"queue": f"q{n % 5}"}) for n in range(20_000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + queries.EARLIEST_WAITING)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    text = json.dumps(plan)
    assert "Seq Scan" not in text and "jobs_job_waiting" in text
    # Five queues: the first probe, one per queue after it, and the one that finds no more.
    scans = [node for node in _nodes(plan[0]["Plan"]) if node.get("Index Name") == "jobs_job_waiting"]
    assert sum(node["Actual Loops"] for node in scans) == 6
    assert max(node["Actual Rows"] for node in scans) <= 1
    assert set(counts.queue_latencies()) == {f"q{n}" for n in range(5)}


def _nodes(node):
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def test_an_empty_queue_still_parses(client):
    families = scrape(client)
    assert samples(families["haulage_jobs"])[(("queue", "default"), ("state", "ready"))] == 0


def test_large_tables_count_live_states_exactly_and_estimate_the_rest(client, monkeypatch):
    monkeypatch.setattr(counts, "EXACT_COUNT_ROWS", 0)
    services.enqueue("tests.noop", {})
    finished("tests.echo", JobStatus.SUCCESSFUL, seconds=1)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE jobs_job")
    by_state = counts.state_counts(["default"])["default"]
    assert by_state[JobStatus.READY] == (1, True)
    assert by_state[JobStatus.RUNNING] == (0, True)
    value, exact = by_state[JobStatus.SUCCESSFUL]
    assert not exact
    if connection.vendor == "postgresql":
        assert value >= 1  # the planner's estimate
    else:
        assert value is None  # SQLite has no estimate to give
    jobs = samples(scrape(client)["haulage_jobs"])
    assert jobs[(("queue", "default"), ("state", "ready"))] == 1


def test_without_a_token_configured_metrics_are_open(client, settings):
    settings.METRICS_TOKEN = ""
    scrape(client)


def test_with_a_token_the_view_wants_it_as_a_bearer(settings):
    settings.METRICS_TOKEN = "s3cret-metrics"
    factory = RequestFactory()
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"},
                    {"HTTP_AUTHORIZATION": "Basic czNjcmV0LW1ldHJpY3M="},
                    {"HTTP_AUTHORIZATION": "s3cret-metrics"}):
        request = factory.get("/metrics", **headers)
        response = metrics.metrics_view(request)
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
    request = factory.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics")
    response = metrics.metrics_view(request)
    assert response.status_code == 200
    assert b"haulage_jobs" in response.content


def test_with_a_token_an_anonymous_scrape_gets_401(client, settings):
    settings.METRICS_TOKEN = "s3cret-metrics"
    response = client.get("/metrics")
    assert response.status_code == 401
    assert b"haulage_jobs" not in response.content


def test_the_bearer_token_passes_the_site_middleware(client, settings):
    settings.METRICS_TOKEN = "s3cret-metrics"
    scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-metrics")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


# Both in the decorator: a `settings` fixture changed inside it would, at its
# teardown, put back the decorator's MIDDLEWARE for every later test.
@override_settings(MIDDLEWARE=[m for m in configured.MIDDLEWARE
                               if m != "core.tokens.BearerTokenMiddleware"],
                   METRICS_TOKEN="s3cret-metrics")
def test_the_bearer_token_opens_the_scrape_through_the_rest_of_the_stack(client):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-metrics")


def test_overdue_schedules_and_failed_firings_show(client):
    from django_q.models import Schedule, Task

    Schedule.objects.all().delete()
    now = timezone.now()
    Schedule.objects.create(name="late", func="tests.scheduled.note", schedule_type="I",
                            minutes=1, next_run=now - timedelta(minutes=10))
    Schedule.objects.create(name="on time", func="tests.scheduled.note", schedule_type="I",
                            minutes=1, next_run=now + timedelta(minutes=1))
    Schedule.objects.create(name="disabled", func="tests.scheduled.note", schedule_type="I",
                            minutes=1, repeats=0, next_run=now - timedelta(days=1))
    Task.objects.create(id="a" * 32, name="x", func="tests.scheduled.explode", group="late",
                        started=now - timedelta(seconds=5), stopped=now, success=False)
    families = scrape(client)
    late = samples(families["haulage_schedule_overdue_seconds"])
    assert set(late) == {(("schedule", "late"),), (("schedule", "on time"),)}
    assert 590 < late[(("schedule", "late"),)] < 700
    assert late[(("schedule", "on time"),)] == 0
    assert samples(families["haulage_recent_schedule_failures"]) == {(("schedule", "late"),): 1}
