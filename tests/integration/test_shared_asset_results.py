"""One holder's work stays theirs: shots are shared by everyone who downloaded a video, so finding
them again (which replaces them, analyses and notes included) is refused while another holder
has notes or analyses on them, both when it is asked for and when the new shots arrive.

Real segmentation, analysis and notes through the embedded CV worker and the local generator.
"""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from downloads import services, shots, storage
from downloads.models import Download, Shot
from insights import conf, data
from insights import services as insights
from insights.models import Insight, InsightKind
from jobs.models import Job, JobStatus
from tests.integration.test_downloads_shots import local_mode, video  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def segmented(video, owner, run_worker, settings):  # noqa: F811
    """The owner's video split into its four shots; insights written by the local generator."""
    settings.INSIGHTS_GATEWAY_URL = ""
    shots.asset_segment(video.asset, owner=owner)
    run_worker(queues=["cv"], timeout=60)
    assert Shot.objects.filter(asset=video.asset).count() == 4
    return video


@pytest.fixture
def holder(segmented):
    """Another user who downloaded the same video (served from the cache: the same asset)."""
    bob = get_user_model().objects.create_user("bob")
    mine = services.download_submit(owner=bob, url=segmented.asset.url)
    assert mine.asset_id == segmented.asset_id
    assert Download.objects.get(pk=mine.pk).current_status == "successful"
    return bob


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def second_shot(asset):
    return Shot.objects.get(asset=asset, index=1)


def notes_of(user, shot, run_worker):
    """The user's notes on `shot`, asked for as the page does and written."""
    notes = insights.insight_request(owner=user, kind=InsightKind.SHOT_NOTES, subject=shot.pk)
    run_worker(queues=["cv", conf.queue()], timeout=60)
    notes.refresh_from_db()
    assert notes.current_status == "successful" and notes.text, notes.error
    return notes


def assert_still_readable(notes, shot):
    """The notes are as they were written, and what they are about is still there to read."""
    kept = Insight.objects.get(pk=notes.pk)
    assert (kept.current_status, kept.text) == ("successful", notes.text)
    provider = data.provider(InsightKind.SHOT_NOTES)
    assert provider.exists(kept.owner, kept.subject)
    assert provider.collect(kept.owner, kept.subject)["start_s"] == pytest.approx(shot.start_s,
                                                                                 abs=0.1)
    assert storage.exists(Shot.objects.get(pk=shot.pk).thumbnail)


@pytest.mark.parametrize("result", ["notes", "analysis"])
def test_a_co_holders_new_segmentation_is_refused_while_another_holds_results(
        segmented, owner, holder, client_of, run_worker, result):
    shot = second_shot(segmented.asset)
    notes = None
    if result == "notes":
        notes = notes_of(holder, shot, run_worker)
    else:
        assert client_for(holder).post(f"/api/shots/{shot.pk}/analyze/").status_code == 202
        run_worker(queues=["cv"], timeout=60)
    segments = Job.objects.filter(kind=shots.SEGMENT_KIND).count()

    refused = client_of.post(f"/api/downloads/{segmented.pk}/segment/")
    assert refused.status_code == 409
    assert refused.json()["error"] == str(shots.SHOTS_IN_USE)
    panel = client_of.post(f"/downloads/{segmented.pk}/shots/segment/",
                           HTTP_HX_REQUEST="true").content.decode()
    assert "Someone else who downloaded this video has notes or analyses" in panel

    assert Job.objects.filter(kind=shots.SEGMENT_KIND).count() == segments  # nothing queued
    assert Shot.objects.get(pk=shot.pk).analysis is not None
    if notes is not None:
        assert_still_readable(notes, shot)
        # Asked again, they are fresh: returned as they are, never failed as gone.
        again = insights.insight_request(owner=holder, kind=InsightKind.SHOT_NOTES,
                                         subject=shot.pk)
        assert (again.pk, again.job_id) == (notes.pk, notes.job_id)


def test_results_that_arrive_while_the_shots_are_found_again_are_kept(
        segmented, owner, holder, client_of, run_worker):
    shot = second_shot(segmented.asset)
    old_folder = storage.absolute(shot.thumbnail).parent
    # Nobody else holds results yet: the owner may ask.
    assert client_of.post(f"/api/downloads/{segmented.pk}/segment/").status_code == 202
    segment = Job.objects.filter(kind=shots.SEGMENT_KIND).latest("pk")
    # Before it runs, the other holder asks for notes on one of the shots it would replace.
    notes = notes_of(holder, shot, run_worker)

    segment.refresh_from_db()
    assert (segment.status, segment.error_code) == (JobStatus.FAILED, shots.ShotsInUse.code)
    assert_still_readable(notes, shot)
    assert old_folder.is_dir()
    assert not (old_folder.parent / str(segment.pk)).exists()  # its own images are not kept
    listed = client_of.get(f"/api/downloads/{segmented.pk}/shots/").json()
    assert listed["segment"]["error"] == str(shots.SHOTS_IN_USE)
    assert [s["id"] for s in listed["shots"]] == list(
        Shot.objects.filter(asset=segmented.asset).values_list("pk", flat=True))


def test_the_only_holder_with_results_may_find_the_shots_again(
        segmented, owner, holder, client_of, run_worker):
    shot = second_shot(segmented.asset)
    mine = notes_of(owner, shot, run_worker)  # the owner's own notes do not hold it back
    theirs = insights.insight_request(owner=holder, kind=InsightKind.SHOT_NOTES, subject=shot.pk)
    Job.objects.filter(pk=theirs.job_id).update(status=JobStatus.FAILED)  # nothing was written
    Insight.objects.filter(pk=theirs.pk).update(status="failed")

    assert client_of.post(f"/api/downloads/{segmented.pk}/segment/").status_code == 202
    run_worker(queues=["cv"], timeout=60)
    segment = Job.objects.filter(kind=shots.SEGMENT_KIND).latest("pk")
    assert segment.status == JobStatus.SUCCESSFUL, segment.error
    found = Shot.objects.filter(asset=segmented.asset)
    assert found.count() == 4 and not found.filter(pk=shot.pk).exists()  # replaced
    assert not data.provider(InsightKind.SHOT_NOTES).exists(owner, mine.subject)


def test_a_holder_who_let_go_of_the_video_holds_nothing_back(
        segmented, owner, holder, client_of, run_worker):
    notes_of(holder, second_shot(segmented.asset), run_worker)
    assert client_of.post(f"/api/downloads/{segmented.pk}/segment/").status_code == 409
    services.download_delete(Download.objects.get(owner=holder))
    assert client_of.post(f"/api/downloads/{segmented.pk}/segment/").status_code == 202
