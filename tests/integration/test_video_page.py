"""Where downloads and insights meet on the pages: the video page's panels, links from the insight
and queue pages, the downloads list's rows, and a cancel by staff as its owner reads it."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from downloads import services
from downloads.models import Download, MediaAsset, Shot
from insights import conf
from insights import services as insights
from insights.models import InsightKind
from jobs import services as jobs
from jobs.models import Job, JobEvent, JobStatus
from tests.integration.test_downloads_pages import ready  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("media_root")
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def offline(settings):
    settings.INSIGHTS_GATEWAY_URL = ""


def shots_of(asset, n=3):
    return Shot.objects.bulk_create(Shot(asset=asset, index=i, start_s=i * 5.0, end_s=i * 5.0 + 5)
                                    for i in range(n))


# --- The video page ------------------------------------------------------------------


def test_the_video_page_asks_for_its_summary_by_post_and_its_get_queues_nothing(
        alice_client, ready):  # noqa: F811
    page = alice_client.get(f"/downloads/{ready.pk}/").content.decode()
    form = re.search(r'<form[^>]*class="insight-request"[^>]*>.*?</form>', page, re.S).group(0)
    assert 'hx-post="/insights/request/"' in form and 'hx-trigger="load"' in form
    assert 'name="kind" value="video_summary"' in form
    assert f'name="subject" value="{ready.asset_id}"' in form
    assert "csrfmiddlewaretoken" in form
    assert not Job.objects.filter(kind__startswith="insights.").exists()  # the GET asked nothing

    # What the page's POST does: an interactive request, answered with the polling panel.
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
    prefetched = insights.insight_request(owner=ready.owner, kind=InsightKind.VIDEO_SUMMARY,
                                          subject=ready.asset_id, tier="prefetch")
    panel = alice_client.post("/insights/request/", {"kind": "video_summary",
                                                     "subject": ready.asset_id}, **HTMX)
    assert panel.status_code == 200
    body = panel.content.decode()
    assert 'data-status="ready"' in body and 'hx-get="/insights/' in body  # it polls
    assert "Queued — next in line." in body
    job = Job.objects.get(kind="insights.video_summary")
    assert job.pk == prefetched.job_id and job.priority == conf.INTERACTIVE  # promoted, not doubled


def test_a_shot_opens_its_notes_and_each_shot_offers_them(alice_client, ready):  # noqa: F811
    shots = shots_of(ready.asset)
    page = alice_client.get(f"/downloads/{ready.pk}/").content.decode()
    assert "Choose a shot to read its notes." in page
    for shot in shots:
        assert f'name="subject" value="{shot.pk}"' in page
    assert page.count('class="inline shot-notes-request"') == 3

    opened = alice_client.get(f"/downloads/{ready.pk}/?shot=1").content.decode()
    notes = re.search(r'<section id="shot-notes".*?</section>', opened, re.S).group(0)
    assert 'name="kind" value="shot_notes"' in notes and f'value="{shots[1].pk}"' in notes
    for junk in ("9", "x", "99999999999999999999", "²"):
        response = alice_client.get(f"/downloads/{ready.pk}/?shot={junk}")
        assert response.status_code == 200
        assert "Choose a shot to read its notes." in response.content.decode()


def test_without_javascript_the_notes_form_comes_back_to_the_shot(alice_client, ready):  # noqa: F811
    shot = shots_of(ready.asset, 2)[1]
    back = f"/downloads/{ready.pk}/?shot=1#shot-notes"
    response = alice_client.post("/insights/request/", {"kind": "shot_notes", "subject": shot.pk,
                                                        "next": back})
    assert response.status_code == 302 and response["Location"] == back
    assert Job.objects.get(kind="insights.shot_notes").priority == conf.INTERACTIVE


# --- Insights and queue pages ------------------------------------------------------------


def test_insight_rows_link_to_their_video_and_shot(alice_client, user, ready):  # noqa: F811
    shot = shots_of(ready.asset, 2)[1]
    insights.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY, subject=ready.asset_id)
    insights.insight_request(owner=user, kind=InsightKind.SHOT_NOTES, subject=shot.pk)
    page = alice_client.get("/insights/").content.decode()
    video = reverse("downloads:detail", args=[ready.pk])
    assert f'<a class="subject" href="{video}">Clip</a>' in page
    assert f'<a class="subject" href="{video}?shot=1#shot-notes">Shot 2 of Clip</a>' in page


def test_the_queue_names_kinds_subjects_and_tiers_in_words(alice_client, user, ready):  # noqa: F811
    Job.objects.filter(pk=ready.job_id).update(status=JobStatus.READY)
    insights.insight_request(owner=user, kind=InsightKind.VIDEO_SUMMARY, subject=ready.asset_id,
                             tier="prefetch")
    page = alice_client.get("/queue/").content.decode()
    fetch = re.search(r'<tr[^>]*data-kind="downloads.fetch".*?</tr>', page, re.S).group(0)
    assert "<strong class=\"kind\">Download</strong>" in fetch and ">Clip</a>" in fetch
    assert "In turn" in fetch and "Prefetch" not in fetch and "(0)" not in fetch
    summary = re.search(r'<tr[^>]*data-kind="insights.video_summary".*?</tr>', page, re.S).group(0)
    assert "Video summary" in summary and "In the background" in summary


# --- The downloads list --------------------------------------------------------------------


def test_rows_show_format_and_length_and_a_failed_one_no_bytes(alice_client, user, ready):  # noqa: F811
    failed = services.download_submit(owner=user, url="https://videos.example.com/gone.mp4",
                                      fmt="audio")
    Job.objects.filter(pk=failed.job_id).update(status=JobStatus.FAILED, error_code="network",
                                                progress_message='{"b":0,"t":null}')
    page = alice_client.get("/downloads/").content.decode()
    finished = page[page.index(f'id="download-{ready.pk}"'):]
    finished = finished[:finished.index("</li>")]
    assert "Best quality (video and audio)" in finished and "2 s long" in finished
    row = alice_client.get(f"/downloads/{failed.pk}/row/").content.decode()
    assert "Audio only" in row and "bytes" not in row
    assert "Retry" in row


@pytest.mark.parametrize("code", ["blocked_destination", "unsupported_url"])
def test_retry_is_not_offered_when_the_address_itself_is_the_cause(alice_client, user, code):
    download = services.download_submit(owner=user, url="https://videos.example.com/a.mp4")
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.FAILED, error_code=code)
    row = alice_client.get(f"/downloads/{download.pk}/row/").content.decode()
    assert "Retry" not in row and "Delete" in row
    response = alice_client.post(f"/api/downloads/{download.pk}/retry/")
    assert response.status_code == 409
    assert Job.objects.get(pk=download.job_id).status == JobStatus.FAILED


def test_the_storage_line_refreshes_when_a_row_finishes(alice_client, user, ready):  # noqa: F811
    page = alice_client.get("/downloads/").content.decode()
    assert 'id="storage"' in page and 'hx-trigger="storage-changed from:body"' in page
    assert "You use 1000\xa0bytes" in page
    finished = alice_client.get(f"/downloads/{ready.pk}/row/", **HTMX)
    assert finished["HX-Trigger"] == "storage-changed"
    line = alice_client.get("/downloads/storage/").content.decode()
    assert "You use 1000\xa0bytes" in line
    alice_client.post(f"/downloads/{ready.pk}/delete/", **HTMX)
    assert "You use 0\xa0bytes" in alice_client.get("/downloads/storage/").content.decode()


def test_the_header_lists_each_section_once_and_marks_the_current_one(alice_client, ready):  # noqa: F811
    for path, current in [("/downloads/", "Downloads"), (f"/downloads/{ready.pk}/", "Downloads"),
                          ("/insights/", "Insights"), ("/queue/", "Queue"), ("/", "Home")]:
        page = alice_client.get(path).content.decode()
        nav = re.search(r'<nav aria-label="Main">.*?</nav>', page, re.S).group(0)
        labels = re.findall(r">([^<>]+)</a>", nav)
        assert len(labels) == len(set(labels)), (path, labels)
        assert re.search(rf'aria-current="page">{current}</a>', nav), (path, nav)
        assert 'rel="icon"' in page


def test_the_favicon_is_served_to_anyone(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith("favicon.svg")


def test_ip_literal_spellings_of_one_host_share_one_asset(user, settings):
    settings.DOWNLOADS_EGRESS_ALLOW = "127.0.0.1:8001"
    for host in ("127.0.0.1", "127.1", "0177.0.0.1", "[::ffff:127.0.0.1]"):
        services.download_submit(owner=user, url=f"http://{host}:8001/sample.mp4")
    assert MediaAsset.objects.count() == 1
    assert MediaAsset.objects.get().url == "http://127.0.0.1:8001/sample.mp4"
    assert Download.objects.count() == 4


# --- A cancel by staff, as its owner reads it -------------------------------------------------


def test_staff_cancel_asks_first_then_the_owner_reads_who_and_why(
        alice_client, user, staff_user, django_capture_on_commit_callbacks):
    download = services.download_submit(owner=user, url="https://videos.example.com/big.mp4")
    staff = Client()
    staff.force_login(staff_user)
    act = reverse("admin:jobs_job_act", args=[download.job_id, "cancel"])

    asked = staff.post(act, {"next": reverse("admin:jobs_job_up_next")})
    assert asked.status_code == 200
    text = asked.content.decode()
    assert 'id="confirm-action"' in text and 'name="confirm" value="yes"' in text
    assert Job.objects.get(pk=download.job_id).status == JobStatus.READY  # not before confirming

    with django_capture_on_commit_callbacks(execute=True):  # the download records its outcome
        done = staff.post(act, {"confirm": "yes", "reason": "the disk is being replaced",
                                "next": reverse("admin:jobs_job_up_next")})
    assert done.status_code == 302
    assert Job.objects.get(pk=download.job_id).status == JobStatus.CANCELLED
    assert JobEvent.objects.get(job_id=download.job_id, kind="cancelled").actor == staff_user

    row = alice_client.get(f"/downloads/{download.pk}/row/").content.decode()
    assert "Cancelled by staff: the disk is being replaced" in row
    body = alice_client.get(f"/api/downloads/{download.pk}/").json()
    assert (body["error_code"], body["error"]) == (
        "cancelled_by_staff", "Cancelled by staff: the disk is being replaced")
    # The download keeps its own copy: pruning the job loses nothing.
    assert Download.objects.get(pk=download.pk).error_code == "cancelled_by_staff"


def test_a_bulk_cancel_of_one_job_is_confirmed_too(user, staff_user):
    download = services.download_submit(owner=user, url="https://videos.example.com/one.mp4")
    staff = Client()
    staff.force_login(staff_user)
    changelist = reverse("admin:jobs_job_changelist")
    page = staff.post(changelist, {"action": "cancel", "_selected_action": [download.job_id]})
    assert page.status_code == 200 and 'id="confirm-action"' in page.content.decode()
    assert Job.objects.get(pk=download.job_id).status == JobStatus.READY
    staff.post(changelist, {"action": "cancel", "_selected_action": [download.job_id],
                            "confirm": "yes", "reason": "duplicate of another"})
    assert Job.objects.get(pk=download.job_id).status == JobStatus.CANCELLED


def test_an_owners_own_cancel_reads_as_theirs(alice_client, user):
    download = services.download_submit(owner=user, url="https://videos.example.com/mine.mp4")
    alice_client.post(f"/api/downloads/{download.pk}/cancel/")
    body = alice_client.get(f"/api/downloads/{download.pk}/").json()
    assert (body["error_code"], body["error"]) == ("cancelled", "This download was cancelled.")


# --- The admin's job page -------------------------------------------------------------------


def test_the_job_page_shows_progress_as_a_bar_and_states_in_one_word(user, staff_user):
    download = services.download_submit(owner=user, url="https://videos.example.com/run.mp4")
    Job.objects.filter(pk=download.job_id).update(
        status=JobStatus.RUNNING, progress=0.42, phase="downloading",
        progress_message='{"b":4200000,"t":10000000,"s":1000000.0,"e":6}')
    staff = Client()
    staff.force_login(staff_user)
    page = staff.get(reverse("admin:jobs_job_change", args=[download.job_id])).content.decode()
    assert '<progress max="100" value="42">' in page
    assert "downloading" in page and "4.0\xa0MB of 9.5\xa0MB" in page and "6 s left" in page
    assert '{"b":' not in page
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL)
    page = staff.get(reverse("admin:jobs_job_change", args=[download.job_id])).content.decode()
    assert "(Successful)" in page and "job-status-successful\">Successful" in page
    assert "(SUCCESSFUL)" not in page


def test_schedules_that_repeat_forever_say_so(staff_user):
    from django_q.models import Schedule

    Schedule.objects.create(name="Every minute", func="tests.scheduled.noop", repeats=-1,
                            schedule_type=Schedule.MINUTES, minutes=1)
    staff = Client()
    staff.force_login(staff_user)
    page = staff.get(reverse("admin:django_q_schedule_changelist")).content.decode()
    assert "forever" in page and ">-1<" not in page


@pytest.mark.parametrize("subject", ["²", "١٢", "7\u0663"])
def test_digits_of_other_scripts_are_not_subject_numbers(alice_client, subject):
    response = alice_client.post("/api/insights/", {"kind": "video_summary", "subject": subject},
                                 content_type="application/json")
    assert response.status_code == 400 and response.json()["field"] == "subject"
    assert alice_client.post("/insights/request/", {"kind": "shot_notes",
                                                    "subject": subject}).status_code == 404
