"""The home page lists the user's jobs of every kind, live first, and polls while one is live."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from core.selectors import RECENT_LIMIT
from downloads import services, shots
from downloads.edits import Edit
from downloads.models import Download, MediaAsset, Shot
from insights import services as insights
from insights.models import InsightKind
from jobs.models import Job, JobStatus
from tests.integration.test_downloads_pages import ready  # noqa: F401 - the fixture
from tests.integration.test_insights import make_asset
from tests.integration.test_insights_api import finish

pytestmark = pytest.mark.usefixtures("media_root")

URL = "https://videos.example.com/running.mp4"
POLL = 'hx-get="/home/jobs/"'


def rows(html):
    """{element id: the row's HTML} of the listed jobs, in the page's order."""
    return dict(re.findall(r'<li id="([^"]+)"(.*?)</li>', html, flags=re.S))


def running_download(owner, url=URL, fraction=0.25):
    download = services.download_submit(owner=owner, url=url, name="Harbour at dawn")
    Job.objects.filter(pk=download.job_id).update(
        status=JobStatus.RUNNING, progress=fraction, phase="downloading", started_at=timezone.now(),
        progress_message='{"b":2621440,"t":10485760,"s":1048576.0,"e":75}')
    return download


def video_with_cv_jobs(owner):
    """A video of the user's with a running shot detection (queued on its own after the download,
    as a finished download queues it) and a failed measurement of one of its shots."""
    asset = make_asset(owner, "Lighthouse")
    segment = shots.asset_segment(asset, owner=owner, check_transport=False)
    Job.objects.filter(pk=segment.pk).update(status=JobStatus.RUNNING, progress=0.4,
                                             phase="detecting", started_at=timezone.now(),
                                             progress_message="Finding shot boundaries")
    shot = Shot.objects.create(asset=asset, index=2, start_s=10, end_s=15, start_frame=250,
                               end_frame=375)
    analyze = shots.shot_analyze(shot, owner=owner, check_transport=False)
    Job.objects.filter(pk=analyze.pk).update(status=JobStatus.FAILED, finished_at=timezone.now(),
                                             error="The clip could not be decoded.")
    return asset, segment, analyze


def test_a_running_and_a_finished_download_are_listed_with_progress_and_links(
        alice_client, user, ready):  # noqa: F811
    running = running_download(user)
    html = alice_client.get("/").content.decode()
    listed = rows(html)
    assert list(listed) == [f"download-{running.pk}", f"download-{ready.pk}"]  # running first
    live = listed[f"download-{running.pk}"]
    assert 'data-status="running"' in live and 'aria-valuenow="25"' in live
    assert "width: 25.0%" in live and "Downloading" in live
    assert f'href="/downloads/{running.pk}/"' in live and "Harbour at dawn" in live
    done = listed[f"download-{ready.pk}"]
    assert 'data-status="successful"' in done and 'aria-valuenow="100"' in done
    assert "Successful" in done and f'href="/downloads/{ready.pk}/"' in done
    assert "just now" in done
    assert POLL in html and 'hx-trigger="every 2s"' in html
    assert 'href="/downloads/"' in html and 'href="/queue/"' in html  # the full lists


def test_cv_jobs_and_insights_are_listed_and_link_to_where_they_live(alice_client, user, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    asset, segment, analyze = video_with_cv_jobs(user)
    video = Download.objects.get(owner=user, asset=asset)
    summary = insights.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY,
                                       subject=asset.pk)
    finish(summary, text="A lighthouse at night.")
    listed = rows(alice_client.get("/").content.decode())

    detecting = listed[f"job-{segment.public_id}"]
    assert 'data-family="shots"' in detecting and 'data-status="running"' in detecting
    assert "Shot detection" in detecting and "Lighthouse" in detecting
    assert 'aria-valuenow="40"' in detecting and "Finding shot boundaries" in detecting
    assert f'href="/downloads/{video.pk}/#shots"' in detecting
    measured = listed[f"job-{analyze.public_id}"]
    assert "Shot analysis" in measured and "Shot 3 of Lighthouse" in measured
    assert 'data-status="failed"' in measured and "The clip could not be decoded." in measured
    summary_row = listed[f"insight-{summary.pk}"]
    assert 'data-family="insight"' in summary_row and "Video summary" in summary_row
    assert "Successful" in summary_row and f'href="/downloads/{video.pk}/"' in summary_row
    assert list(listed)[0] == f"job-{segment.public_id}"  # the one live job leads


def test_a_queued_insight_says_where_it_waits(alice_client, user, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    summary = insights.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY,
                                       subject=make_asset(user, "Dunes").pk)
    html = alice_client.get("/").content.decode()
    row = rows(html)[f"insight-{summary.pk}"]
    assert 'data-status="ready"' in row and "Queued" in row
    assert "Number 1 in the queue." in row
    assert POLL in html


def test_finished_jobs_whose_engine_rows_were_pruned_stay_listed(
        alice_client, user, ready, settings):  # noqa: F811
    settings.INSIGHTS_GATEWAY_URL = ""
    summary = insights.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY,
                                       subject=ready.asset_id)
    finish(summary)
    Job.objects.all().delete()  # their rows keep their final state
    html = alice_client.get("/").content.decode()
    assert set(rows(html)) == {f"download-{ready.pk}", f"insight-{summary.pk}"}
    assert POLL not in html


def test_another_users_jobs_are_absent(alice_client, user, other_user, settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    theirs = running_download(other_user)
    asset, segment, analyze = video_with_cv_jobs(other_user)
    summary = insights.insight_request(owner=other_user, kind=InsightKind.VIDEO_SUMMARY,
                                       subject=asset.pk)
    html = alice_client.get("/").content.decode()
    assert rows(html) == {}
    for their_id in (theirs.pk, segment.public_id, analyze.public_id, summary.pk):
        assert str(their_id) not in html
    assert "No jobs yet" in html
    # The partial too.
    assert rows(alice_client.get("/home/jobs/").content.decode()) == {}


def test_with_no_job_the_page_says_how_to_start_one(alice_client, settings):
    settings.HAULAGE_SAMPLE_URL = "http://127.0.0.1:8001/sample.mp4"
    settings.DOWNLOADS_EGRESS_ALLOW = ""
    html = alice_client.get("/").content.decode()
    assert "No jobs yet" in html
    assert 'paste the address of a video on the <a href="/downloads/#id_url">Downloads page</a>' in html
    assert "sample.mp4" not in html  # downloads could not reach it
    assert "hx-trigger" not in html
    # As `make run` starts the site: the sample video it serves is admitted, and named.
    settings.HAULAGE_SAMPLE_URL = "http://127.0.0.1:8001/sample.mp4"
    settings.DOWNLOADS_EGRESS_ALLOW = "127.0.0.1:8001"
    html = alice_client.get("/").content.decode()
    assert "paste <code>http://127.0.0.1:8001/sample.mp4</code>" in html


def test_the_list_stops_polling_once_nothing_is_live(alice_client, user):
    download = running_download(user)
    live = alice_client.get("/home/jobs/").content.decode()
    assert live.lstrip().startswith('<section id="home-jobs"') and POLL in live
    assert "<html" not in live  # only the list
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL, progress=1.0,
                                                  finished_at=timezone.now())
    Download.objects.filter(pk=download.pk).update(status="successful")
    done = alice_client.get("/home/jobs/").content.decode()
    assert "hx-trigger" not in done and "hx-get" not in done
    assert 'data-status="successful"' in rows(done)[f"download-{download.pk}"]


def test_a_paused_job_keeps_the_list_polling(alice_client, user):
    download = services.download_submit(owner=user, url=URL)
    services.download_pause(download, actor=user)
    html = alice_client.get("/home/jobs/").content.decode()
    assert 'data-status="paused"' in rows(html)[f"download-{download.pk}"] and POLL in html


def test_only_the_most_recently_ended_are_listed(alice_client, user):
    now = timezone.now()
    ended = []
    for n in range(RECENT_LIMIT + 2):
        download = services.download_submit(owner=user, url=f"{URL}?n={n}")
        Job.objects.filter(pk=download.job_id).update(
            status=JobStatus.FAILED, finished_at=now - timedelta(minutes=n), error_code="network")
        ended.append(f"download-{download.pk}")
    assert list(rows(alice_client.get("/").content.decode())) == ended[:RECENT_LIMIT]


def test_the_partial_answers_get_only(alice_client):
    assert alice_client.post("/home/jobs/").status_code == 405


@pytest.mark.parametrize("path", ["/", "/home/jobs/"])
def test_the_list_needs_a_login(client, db, path):
    response = client.get(path)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_an_edit_is_called_one(alice_client, user, ready):  # noqa: F811
    edit = services.edit_submit(owner=user, source=ready, edit=Edit("audio"))
    listed = rows(alice_client.get("/").content.decode())
    assert '<span class="kind">Edit</span>' in listed[f"download-{edit.pk}"]
    assert '<span class="kind">Download</span>' in listed[f"download-{ready.pk}"]


def test_cv_jobs_of_a_video_no_longer_held_are_named_so(alice_client, user):
    asset, segment, analyze = video_with_cv_jobs(user)
    Download.objects.filter(owner=user, asset=asset).delete()
    MediaAsset.objects.filter(pk=asset.pk).update(title="Gone")
    listed = rows(alice_client.get("/").content.decode())
    assert "A video you no longer hold" in listed[f"job-{segment.public_id}"]
    assert "href" not in listed[f"job-{segment.public_id}"]
