"""Insights on the engine, against a fake OpenAI-compatible gateway over real HTTP.

Workers run in this process (`run_worker`, a burst worker); the queue's gap is
set to 0 unless a test is about the gap, so nothing waits 20 seconds.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from downloads.models import Download, DownloadStatus, MediaAsset, url_digest
from insights import conf, selectors, services
from insights.models import Insight, InsightKind
from jobs import services as jobs
from jobs.maintenance import reaper
from jobs.models import Job, JobStatus
from jobs.runtime.worker import Worker
from tests.gateway import FakeGateway, Reply
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY = InsightKind.VIDEO_SUMMARY


@pytest.fixture(autouse=True)
def insights_queue(transactional_db):
    """One at a time, as in production, but no gap (tests about the gap set their own)."""
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)


@pytest.fixture
def gateway(settings):
    with FakeGateway() as fake:
        settings.INSIGHTS_GATEWAY_URL = fake.url
        settings.INSIGHTS_MODEL = "fake-model"
        settings.INSIGHTS_API_KEY = "sk-test"
        yield fake


@pytest.fixture
def offline(settings):
    settings.INSIGHTS_GATEWAY_URL = ""


def make_asset(owner, title, *, duration_s=65.0, **fields):
    url = f"https://videos.example/{title.replace(' ', '-')}"
    asset = MediaAsset.objects.create(url=url, url_digest=url_digest(url), format="best",
                                      state=MediaAsset.State.READY, title=title,
                                      duration_s=duration_s, size_bytes=1_000_000, **fields)
    Download.objects.create(owner=owner, asset=asset, status=DownloadStatus.SUCCESSFUL,
                            finished_at=timezone.now())
    return asset


def ask(owner, asset, tier="interactive"):
    return services.insight_request(owner=owner, kind=SUMMARY, subject=asset.pk, tier=tier)


def job_of(insight):
    return Job.objects.get(pk=Insight.objects.get(pk=insight.pk).job_id)


def run(run_worker, **options):
    return run_worker(queues=[conf.queue()], **options)


# --- Priorities ------------------------------------------------------------------------


def test_an_interactive_request_runs_before_ten_queued_prefetch_jobs(user, gateway, run_worker,
                                                                    settings):
    settings.INSIGHTS_USER_QUEUED = 20  # this is about tiers: room for all eleven
    assets = [make_asset(user, f"Clip {i}") for i in range(12)]
    for asset in assets[:11]:
        ask(user, asset, "prefetch")
    queued = job_of(ask(user, assets[5], "prefetch"))

    # The page of clip 5 opens: its queued prefetch job is promoted, not duplicated...
    promoted = job_of(ask(user, assets[5]))
    assert promoted.pk == queued.pk and promoted.priority == conf.INTERACTIVE
    # ...and a later backfill does not demote it.
    assert job_of(ask(user, assets[5], "prefetch")).priority == conf.INTERACTIVE
    # A page asking for something not queued yet goes ahead of the backfill too.
    ask(user, assets[11])
    assert Job.objects.filter(kind="insights.video_summary").count() == 12

    run(run_worker, concurrency=4)

    titles = [seen.facts["title"] for seen in gateway.requests]
    assert titles[:2] == ["Clip 5", "Clip 11"]
    assert sorted(titles[2:]) == sorted(f"Clip {i}" for i in range(11) if i != 5)
    assert gateway.max_in_flight == 1
    assert set(Insight.objects.values_list("status", flat=True)) == {"successful"}


# --- Gateway etiquette ------------------------------------------------------------------


def test_the_gap_between_generations_is_respected(user, gateway, run_worker):
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=1.0)
    for i in range(3):
        ask(user, make_asset(user, f"Gap {i}"))
    run(run_worker, concurrency=4)
    starts = [seen.started_at for seen in gateway.requests]
    assert len(starts) == 3
    # Claims are at least a gap apart by the database's clock; the requests
    # follow their claims within milliseconds.
    assert all(later - earlier >= 0.9 for earlier, later in zip(starts, starts[1:], strict=False))


def test_a_429_snoozes_until_the_gateways_retry_after(user, gateway, run_worker):
    gateway.queue(Reply(status=429, headers={"Retry-After": "120"}, message="slow down"))
    insight = ask(user, make_asset(user, "Busy"))
    before = timezone.now()
    run(run_worker)
    after = timezone.now()
    job = job_of(insight)
    assert job.status == JobStatus.READY and job.error_code == "rate_limited"
    assert (job.attempts, job.snoozes) == (0, 1)  # a busy gateway spends none of the three
    slack = timedelta(seconds=1)
    assert before + timedelta(seconds=120) - slack <= job.run_after <= after + timedelta(seconds=120) + slack
    state = selectors.insight_state(Insight.objects.get(pk=insight.pk))
    assert (state.status, state.waiting_code) == ("ready", "scheduled")
    assert len(gateway.requests) == 1


def test_a_busy_gateway_does_not_use_up_an_insights_attempts(user, gateway, run_worker, settings):
    settings.INSIGHTS_MAX_ATTEMPTS = 1  # a 429 that spent an attempt would fail it
    gateway.queue(Reply(status=429, headers={"Retry-After": "2"}, message="slow down"))
    insight = ask(user, make_asset(user, "Busy then fine"))
    run(run_worker)
    assert job_of(insight).status == JobStatus.READY
    assert wait_until(lambda: job_of(insight).run_after <= timezone.now(), timeout=10)
    run(run_worker)
    job = job_of(insight)
    assert (job.status, job.attempts, job.snoozes) == (JobStatus.SUCCESSFUL, 1, 1)
    assert Insight.objects.get(pk=insight.pk).text == "Generated text #2."
    first, second = gateway.requests
    assert second.started_at - first.started_at >= 1.9  # it waited what the gateway asked


def test_a_400_fails_at_once_with_the_gateways_message(user, gateway, run_worker):
    gateway.queue(Reply(status=400, message="The model `fake-model` does not exist"))
    insight = ask(user, make_asset(user, "Refused"))
    run(run_worker)
    job = job_of(insight)
    assert (job.status, job.attempts, job.error_code) == (JobStatus.FAILED, 1, "gateway_refused")
    assert "The model `fake-model` does not exist" in job.error
    row = Insight.objects.get(pk=insight.pk)
    assert row.status == "failed" and "does not exist" in row.error  # the copy outlives the job
    assert len(gateway.requests) == 1


def test_server_errors_are_retried_until_one_succeeds(user, gateway, run_worker, settings):
    settings.JOBS_BACKOFF_BASE_SECONDS = 0
    gateway.queue(Reply(status=500), Reply(status=503))
    insight = ask(user, make_asset(user, "Flaky"))
    run(run_worker)
    job = job_of(insight)
    assert (job.status, job.attempts) == (JobStatus.SUCCESSFUL, 3)
    assert [e["code"] for e in job.errors] == ["gateway_error", "gateway_error"]
    assert Insight.objects.get(pk=insight.pk).text == "Generated text #3."


def test_a_gateway_slower_than_the_read_timeout_is_an_attempt_spent(user, gateway, run_worker,
                                                                    settings):
    settings.INSIGHTS_READ_TIMEOUT_SECONDS = 0.3
    settings.INSIGHTS_MAX_ATTEMPTS = 1
    gateway.default = Reply(delay_s=1.5)
    insight = ask(user, make_asset(user, "Slow"))
    run(run_worker)
    job = job_of(insight)
    assert (job.status, job.error_code) == (JobStatus.FAILED, "gateway_timeout")


def test_the_request_carries_the_model_the_key_and_the_facts(user, gateway, run_worker):
    insight = ask(user, make_asset(user, "Facts", duration_s=125.0))
    run(run_worker)
    seen = gateway.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["Authorization"] == "Bearer sk-test"
    assert seen.body["model"] == "fake-model"
    assert seen.facts["title"] == "Facts" and seen.facts["duration_s"] == 125.0
    row = Insight.objects.get(pk=insight.pk)
    assert (row.generator, row.model, row.text) == ("gateway", "fake-model", "Generated text #1.")


# --- Fingerprints, cool-down, retry ---------------------------------------------------------


def test_unchanged_data_is_not_regenerated_and_changed_data_is(user, gateway, run_worker):
    asset = make_asset(user, "Original title")
    first = job_of(ask(user, asset))
    run(run_worker)
    assert len(gateway.requests) == 1

    # The page is opened again and again: nothing new is queued or generated.
    for _ in range(5):
        again = ask(user, asset)
        assert again.job_id == first.pk
    run(run_worker)
    assert len(gateway.requests) == 1
    assert Job.objects.filter(kind="insights.video_summary").count() == 1

    MediaAsset.objects.filter(pk=asset.pk).update(title="A better title")
    rerun = job_of(ask(user, asset))
    assert rerun.pk != first.pk and rerun.status == JobStatus.READY and rerun.attempts == 0
    run(run_worker)
    assert [seen.facts["title"] for seen in gateway.requests] == ["Original title", "A better title"]
    assert Insight.objects.get(owner=user).text == "Generated text #2."


def test_data_that_changes_while_its_text_is_written_is_written_again_by_a_run_after_it(
        user, gateway, run_worker):
    # The page asks again when new data arrives; while the text is being written that request
    # merges into the running job, and the engine runs the job again for it when it ends.
    asset = make_asset(user, "Original title")
    first = job_of(ask(user, asset))
    gateway.default = Reply(delay_s=1.0)
    merged, followed = [], []

    def new_data_arrives():
        wait_until(lambda: gateway.requests)
        MediaAsset.objects.filter(pk=asset.pk).update(title="A better title")
        merged.append(ask(user, asset).job_id)
        connection.close()

    arrival = threading.Thread(target=new_data_arrives)
    arrival.start()
    run(run_worker)
    arrival.join()
    assert merged == [first.pk]  # the request found the job running and merged into it
    assert [seen.facts["title"] for seen in gateway.requests] == ["Original title",
                                                                  "A better title"]
    first.refresh_from_db()
    assert (first.status, first.snoozes, first.attempts) == (JobStatus.SUCCESSFUL, 0, 1)
    written = Insight.objects.get(owner=user)
    again = written.job
    assert again.pk != first.pk and again.status == JobStatus.SUCCESSFUL
    assert written.text == "Generated text #2." and written.status == "successful"
    followed.append(ask(user, asset).job_id)
    assert followed == [again.pk]  # up to date: nothing more is queued
    assert Job.objects.filter(kind="insights.video_summary").count() == 2


def test_many_requests_while_its_text_is_written_make_one_more_run_for_the_latest_data(
        user, gateway, run_worker):
    asset = make_asset(user, "Version 0")
    first = job_of(ask(user, asset))
    gateway.default = Reply(delay_s=1.0)

    def new_data_arrives():
        wait_until(lambda: gateway.requests)
        for n in (1, 2, 3):
            MediaAsset.objects.filter(pk=asset.pk).update(title=f"Version {n}")
            assert ask(user, asset).job_id == first.pk
        connection.close()

    arrival = threading.Thread(target=new_data_arrives)
    arrival.start()
    run(run_worker)
    arrival.join()
    assert [seen.facts["title"] for seen in gateway.requests] == ["Version 0", "Version 3"]
    assert Job.objects.filter(kind="insights.video_summary").count() == 2
    assert Insight.objects.get(owner=user).text == "Generated text #2."


def test_a_pruned_job_does_not_make_a_fresh_insight_run_again(user, gateway, run_worker):
    asset = make_asset(user, "Kept")
    insight = ask(user, asset)
    run(run_worker)
    Job.objects.filter(pk=job_of(insight).pk).delete()  # history pruning
    again = ask(user, asset)
    assert again.job_id is None and again.status == "successful"
    assert not Job.objects.exists()


def test_a_given_up_insight_is_rearmed_when_asked_for_after_its_cooldown(user, gateway, run_worker):
    gateway.queue(Reply(status=400, message="bad request"))
    asset = make_asset(user, "Cooling")
    job = job_of(ask(user, asset))
    run(run_worker)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED

    # Asking again while it cools down neither restarts it nor queues another.
    assert ask(user, asset).job_id == job.pk
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED

    cooldown = conf.retry_after_s()
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(seconds=cooldown - 5))
    assert ask(user, asset).status == "failed"
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(seconds=cooldown + 5))
    # Past it, nothing happens by itself (the reaper re-runs no given-up job)...
    Worker(queues=[conf.queue()]).reap()
    run(run_worker)
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    # ...but asking again re-arms the same job, attempts from 0.
    again = ask(user, asset)
    assert (again.job_id, again.status) == (job.pk, "ready")
    job.refresh_from_db()
    assert (job.status, job.attempts, job.finished_at) == (JobStatus.READY, 0, None)
    assert job.events.filter(kind="rearmed").count() == 1
    run(run_worker)
    assert Insight.objects.get(owner=user).text == "Generated text #2."
    assert Job.objects.filter(kind="insights.video_summary").count() == 1


def test_retry_failed_requeues_at_once_skipping_the_cooldown(user, alice_client, gateway, run_worker):
    gateway.queue(Reply(status=400, message="no"), Reply(status=400, message="no"))
    failed = [job_of(ask(user, make_asset(user, f"Broken {i}"))) for i in range(2)]
    run(run_worker)
    assert {j.status for j in Job.objects.filter(pk__in=[j.pk for j in failed])} == {JobStatus.FAILED}

    response = alice_client.post("/api/insights/retry-failed/")
    assert response.status_code == 200 and response.json() == {"retried": 2, "skipped": 0}
    now = timezone.now()
    for job in Job.objects.filter(pk__in=[j.pk for j in failed]):
        assert (job.status, job.attempts) == (JobStatus.READY, 0)
        assert job.run_after <= now
    assert set(Insight.objects.values_list("status", flat=True)) == {"ready"}
    run(run_worker)
    assert set(Insight.objects.values_list("status", flat=True)) == {"successful"}


# --- Subjects that no longer exist ------------------------------------------------------


def test_queued_jobs_for_vanished_subjects_are_dropped(user, gateway, run_worker):
    kept, gone = make_asset(user, "Kept"), make_asset(user, "Gone")
    kept_job, gone_job = job_of(ask(user, kept, "prefetch")), job_of(ask(user, gone, "prefetch"))
    Download.objects.filter(owner=user, asset=gone).delete()
    services.insights_prefetch(user)
    assert Job.objects.get(pk=gone_job.pk).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=kept_job.pk).status == JobStatus.READY
    assert Insight.objects.get(owner=user, subject=str(gone.pk)).status == "cancelled"
    run(run_worker)
    titles = {seen.facts.get("title") for seen in gateway.requests}
    assert "Gone" not in titles and "Kept" in titles


def test_a_subject_gone_before_its_turn_fails_without_a_gateway_call(user, gateway, run_worker):
    asset = make_asset(user, "Soon deleted")
    insight = ask(user, asset)
    Download.objects.filter(owner=user).delete()
    run(run_worker)
    job = job_of(insight)
    assert (job.status, job.error_code) == (JobStatus.FAILED, "subject_gone")
    assert gateway.requests == []


def test_a_library_overview_supersedes_queued_ones_for_another_subject(user, offline):
    stale = jobs.enqueue("insights.library_overview", {"insight": "stale"}, owner=user)
    services.insight_request(owner=user, kind=InsightKind.LIBRARY_OVERVIEW, subject="library")
    assert Job.objects.get(pk=stale.pk).status == JobStatus.CANCELLED


# --- The local generator ----------------------------------------------------------------


def test_without_a_gateway_the_local_generator_writes_from_the_same_data(user, offline, run_worker):
    asset = make_asset(user, "Harbour at dawn", duration_s=3725.0,
                       metadata={"uploader": "Sea Films", "description": "Boats leave at first light."})
    make_asset(user, "Second clip", duration_s=30.0)
    summary = ask(user, asset)
    library = services.insight_request(owner=user, kind=InsightKind.LIBRARY_OVERVIEW,
                                       subject="library")
    run(run_worker)
    summary, library = Insight.objects.get(pk=summary.pk), Insight.objects.get(pk=library.pk)
    assert summary.generator == "local" and summary.model
    assert "Harbour at dawn" in summary.text and "1:02:05" in summary.text
    assert "Sea Films" in summary.text and "Boats leave at first light." in summary.text
    assert "2 finished downloads" in library.text and "Harbour at dawn" in library.text
    # Deterministic: the same data gives the same text.
    from insights import data, generators

    facts = data.provider(SUMMARY).collect(user, str(asset.pk))
    assert generators.local_text(SUMMARY, facts) == summary.text


def test_shot_notes_say_they_are_not_available_without_shots(user, alice_client):
    response = alice_client.post("/api/insights/", {"kind": "shot_notes", "subject": "1"},
                                 content_type="application/json")
    assert response.status_code == 404
    assert not Job.objects.exists()


# --- Fencing ---------------------------------------------------------------------------


def test_a_stale_worker_cannot_overwrite_the_insight_once_its_lease_moved_on(user, offline):
    from jobs.engine import claiming
    from jobs.models import Worker as WorkerRow
    from jobs.runtime import execution
    from jobs.runtime.context import JobContext

    insight = ask(user, make_asset(user, "Fenced"))
    kinds = [services.job_kind(SUMMARY)]

    def claim(name):
        worker = WorkerRow.objects.create(name=name, host="h", pid=1)
        [job] = claiming.claim(worker, queues=[conf.queue()], kinds=kinds, limit=1)
        return job

    stale = claim("frozen")
    # Its worker froze past the lease: the job is rescued and another attempt takes it.
    Job.objects.filter(pk=stale.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reaper.rescue_expired() == [stale.pk]
    # Due a second ago: SQLite's clock has whole milliseconds, so a job due "now" to the
    # microsecond may not be due yet to a claim in the same millisecond.
    Job.objects.filter(pk=stale.pk).update(run_after=timezone.now() - timedelta(seconds=1))
    fresh = claim("survivor")
    assert execution.run_handler(fresh, JobContext(fresh))[0] == "ok"
    written = Insight.objects.get(pk=insight.pk)
    assert written.status == "successful" and written.text

    # The frozen worker wakes and finishes its generation: it writes nothing.
    Insight.objects.filter(pk=insight.pk).update(text="written by the attempt holding the lease")
    ctx = JobContext(stale)
    outcome, value = execution.run_handler(stale, ctx)
    assert (outcome, type(value).__name__, ctx.stop_reason) == ("error", "LeaseLost", "lease_lost")
    execution.settle(stale, ctx, outcome, value)
    assert Insight.objects.get(pk=insight.pk).text == "written by the attempt holding the lease"
    job = Job.objects.get(pk=stale.pk)
    assert (job.status, job.lease_token, job.attempts) == (JobStatus.RUNNING, fresh.lease_token, 2)


def test_a_prefetch_waiting_for_its_cv_job_survives_another_videos_prefetch(user):
    """Jobs of the insight queue that write no insight (a prefetch waiting for its parent)
    name none: looking for vanished subjects must pass them by, not fail on them."""
    first, second = make_asset(user, "First"), make_asset(user, "Second")
    parent = jobs.enqueue("tests.sleep_for", {"seconds": 60})
    waiting = jobs.enqueue("insights.prefetch", {"after": "downloads.segment", "of": {"asset": first.pk}},
                           owner=user, depends_on=[parent])
    requested = services.insights_prefetch(user, asset_id=second.pk)
    assert {insight.kind for insight in requested} == {InsightKind.LIBRARY_OVERVIEW,
                                                       InsightKind.VIDEO_SUMMARY}
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.READY
