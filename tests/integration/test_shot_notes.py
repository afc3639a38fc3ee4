"""Shot notes while the user looks: notes asked for a shot not measured yet ask for its
analysis first and wait for it; without a gateway, the insights skip the gateway's single
slot and gap (the local generator spares nobody's gateway)."""

import re

import pytest

from downloads.models import Shot
from insights import conf
from insights import services as insights
from insights.models import Insight, InsightKind
from jobs import services as jobs
from jobs.models import Job, JobDependency, JobStatus
from tests.integration.test_downloads_shots import local_mode, video  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shot(video, client_of, run_worker):  # noqa: F811
    """The second shot of the four-shot sample, found by a real segmentation, not measured."""
    assert client_of.post(f"/api/downloads/{video.pk}/segment/").status_code == 202
    run_worker(queues=["cv"], timeout=60)
    found = Shot.objects.get(asset=video.asset, index=1)
    assert found.analysis is None
    return found


@pytest.fixture
def gateway_etiquette(settings):
    """The seed's gateway etiquette on the gateway's queue: one at a time, 20 s apart."""
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=20)


def ask_notes(client, shot):
    response = client.post("/api/insights/", {"kind": "shot_notes", "subject": shot.pk},
                           content_type="application/json")
    assert response.status_code in (200, 202), response.content
    return Insight.objects.get(pk=response.json()["id"])


def test_notes_on_a_shot_not_analysed_ask_for_its_analysis_first_and_describe_it(
        shot, client_of, run_worker, settings, gateway_etiquette):
    settings.INSIGHTS_GATEWAY_URL = ""
    notes = ask_notes(client_of, shot)

    [analysis] = Job.objects.filter(kind="downloads.analyze", payload__shot=shot.pk)
    assert analysis.is_live and analysis.priority == conf.INTERACTIVE
    assert list(JobDependency.objects.filter(child_id=notes.job_id)
                .values_list("parent_id", flat=True)) == [analysis.pk]
    # Asked again while it waits: the same two jobs, nothing more.
    assert ask_notes(client_of, shot).job_id == notes.job_id
    assert Job.objects.filter(kind="downloads.analyze").count() == 1

    run_worker(queues=["cv", conf.queue(), "default"], timeout=60)
    notes.refresh_from_db()
    shot.refresh_from_db()
    assert shot.analysis is not None and notes.status == "successful"
    # The analysis' own prefetch asked for the same notes from the same data: written once.
    assert Job.objects.filter(kind="insights.prefetch", status=JobStatus.SUCCESSFUL).exists()
    assert Job.objects.filter(kind="insights.shot_notes").count() == 1
    assert "not been analysed" not in notes.text
    written = re.search(r"brightness (\d\.\d\d)", notes.text)  # what the analysis measured
    assert written and abs(float(written.group(1)) - shot.analysis["brightness"]) <= 0.006
    # Fresh now: asking again returns them as they are.
    assert ask_notes(client_of, shot).job_id == notes.job_id
    assert Job.objects.filter(kind="downloads.analyze").count() == 1


def test_notes_of_an_analysed_shot_wait_for_nothing(shot, owner, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    Shot.objects.filter(pk=shot.pk).update(analysis={"brightness": 0.4, "motion_mean": 0.1})
    notes = insights.insight_request(owner=owner, kind=InsightKind.SHOT_NOTES, subject=shot.pk)
    assert not JobDependency.objects.filter(child_id=notes.job_id).exists()
    assert not Job.objects.filter(kind="downloads.analyze").exists()


def test_a_prefetch_of_notes_queues_no_cv_work(shot, owner, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    insights.insight_request(owner=owner, kind=InsightKind.SHOT_NOTES, subject=shot.pk,
                             tier="prefetch")
    assert not Job.objects.filter(kind="downloads.analyze").exists()


def test_without_a_gateway_insights_skip_the_gateways_slot_and_gap(
        shot, owner, run_worker, settings, gateway_etiquette):
    settings.INSIGHTS_GATEWAY_URL = ""
    Shot.objects.filter(pk=shot.pk).update(analysis={"brightness": 0.4, "motion_mean": 0.1})
    # A backlog of prefetch work, then the notes the user clicked for.
    backlog = insights.insights_prefetch(owner, asset_id=shot.asset_id)
    notes = insights.insight_request(owner=owner, kind=InsightKind.SHOT_NOTES, subject=shot.pk)
    asked = [*backlog, notes]
    queues = set(Job.objects.filter(pk__in=[i.job_id for i in asked]).values_list("queue", flat=True))
    assert queues == {conf.LOCAL_QUEUE}

    # On the gateway's queue these would take a 20 s gap each; here one burst writes them all.
    run_worker(timeout=15)
    assert set(Insight.objects.filter(pk__in=[i.pk for i in asked])
               .values_list("status", flat=True)) == {"successful"}


def test_with_a_gateway_the_seeds_etiquette_stays(shot, owner, settings, gateway_etiquette):
    settings.INSIGHTS_GATEWAY_URL = "http://127.0.0.1:9/v1"  # configured; no worker calls it
    Shot.objects.filter(pk=shot.pk).update(analysis={"brightness": 0.4, "motion_mean": 0.1})
    notes = insights.insight_request(owner=owner, kind=InsightKind.SHOT_NOTES, subject=shot.pk)
    job = Job.objects.get(pk=notes.job_id)
    assert job.queue == conf.QUEUE and job.status == JobStatus.READY
