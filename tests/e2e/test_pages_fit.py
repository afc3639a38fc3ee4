"""Every page fits a phone (390 px) and a laptop (1280 px) without sideways scrolling, full of the
kind of content that breaks layouts: long names without spaces, wide tables, many actions.

Each page is saved as a screenshot (see tests/e2e/conftest.py's `screenshot`).
"""

import shutil
from datetime import datetime
from importlib import import_module

import pytest
from django.apps import apps
from django.utils import timezone
from django_q.models import Schedule, Task

from downloads import services, shots, storage
from downloads.models import Download, MediaAsset, Shot
from insights.models import Generator, Insight, InsightKind, InsightStatus
from jobs import services as jobs
from jobs.models import Job, JobStatus, Worker
from subscriptions import services as subscriptions
from tests import media
from tests.e2e.conftest import LAPTOP, PHONE, sideways_overflow, visit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = "A-holiday-recording-whose-name-has-no-spaces-at-all-so-that-it-must-wrap-somewhere.mp4"


@pytest.fixture
def library(django_user_model, media_root, settings):
    """A user with a finished video (shots, a summary), a failed and a queued download, a
    subscription, and the jobs staff see for them."""
    settings.DOWNLOADS_EGRESS_ALLOW = ""
    user = django_user_model.objects.create_user("dora-the-explorer-with-a-long-user-name")
    video = services.download_submit(owner=user, url=f"https://videos.example.com/{LONG}",
                                     name=LONG)
    asset = video.asset
    storage.asset_dir(asset.pk).mkdir(parents=True)
    shutil.copy(media.short_mp4(), storage.asset_dir(asset.pk) / "media.mp4")
    MediaAsset.objects.filter(pk=asset.pk).update(
        state="ready", file=f"assets/{asset.pk}/media.mp4", size_bytes=123_456, duration_s=20.0,
        title=LONG, metadata={"width": 160, "height": 120}, ready_at=timezone.now(),
        last_accessed_at=timezone.now())
    Job.objects.filter(pk=video.job_id).update(status=JobStatus.SUCCESSFUL, progress=1.0,
                                               finished_at=timezone.now())
    Download.objects.filter(pk=video.pk).update(status="successful", finished_at=timezone.now())
    Shot.objects.bulk_create(Shot(asset=asset, index=i, start_s=i * 5.0, end_s=i * 5.0 + 5,
                                  analysis={"brightness": 0.4, "motion": [[0, 0.1], [1, 0.3]],
                                            "colors": [{"hex": "#2f6fdb", "share": 0.6}],
                                            "keyframe_strip": ""})
                             for i in range(4))
    segment = shots.asset_segment(asset, owner=user, check_transport=False)
    Job.objects.filter(pk=segment.pk).update(status=JobStatus.SUCCESSFUL, progress=1.0,
                                             finished_at=timezone.now())
    Insight.objects.create(owner=user, kind=InsightKind.VIDEO_SUMMARY, subject=str(asset.pk),
                           status=InsightStatus.SUCCESSFUL, generator=Generator.LOCAL,
                           text="“" + LONG + "” is a video of 0:20. " * 3,
                           generated_at=timezone.now())
    failed = services.download_submit(owner=user, url=f"https://other.example.com/{LONG}?v=2")
    Job.objects.filter(pk=failed.job_id).update(
        status=JobStatus.FAILED, error_code="network", finished_at=timezone.now(),
        error="ConnectionResetError: " + "x" * 200)
    queued = services.download_submit(owner=user, url=f"https://third.example.com/{LONG}")
    Job.objects.filter(pk=queued.job_id).update(
        status=JobStatus.RUNNING, progress=0.37, phase="downloading", started_at=timezone.now(),
        progress_message='{"b":3700000,"t":10000000,"s":1000000.0,"e":6}')
    services.download_submit(owner=user, url=f"https://fourth.example.com/{LONG}", fmt="audio")
    subscriptions.subscribe(user, f"https://videos.example.com/playlist/{LONG}", interval_s=3600)
    Worker.objects.create(name=f"worker-on-{LONG}", host="host-" + "x" * 60, pid=4242,
                          queues=["default", "downloads", "cv", "insights", "subscriptions"],
                          kinds=["downloads.fetch"], concurrency=4)
    return {"user": user, "video": video, "running_job": queued.job_id, "segment_job": segment}


def user_pages(video):
    return {"home": "/", "downloads": "/downloads/", "video": f"/downloads/{video.pk}/?shot=1",
            "insights": "/insights/", "queue": "/queue/", "subscriptions": "/subscriptions/",
            "account": "/accounts/password_change/"}


def admin_pages(job_id):
    return {"admin-index": "/admin/", "admin-dashboard": "/admin/jobs/job/dashboard/",
            "admin-rate-limits": "/admin/jobs/ratelimit/",
            "admin-up-next": "/admin/jobs/job/up-next/?queue=downloads",
            "admin-queues": "/admin/jobs/job/queues/", "admin-workers": "/admin/jobs/job/workers/",
            "admin-job": f"/admin/jobs/job/{job_id}/change/", "admin-jobs": "/admin/jobs/job/",
            "admin-schedules": "/admin/django_q/schedule/",
            "admin-downloads": "/admin/downloads/download/", "admin-assets": "/admin/downloads/mediaasset/",
            "admin-insights": "/admin/insights/insight/", "admin-quotas": "/admin/downloads/downloadquota/"}


@pytest.mark.parametrize("width", [PHONE, LAPTOP])
def test_every_page_fits_without_sideways_scrolling(live_server, page, library, log_in,
                                                    screenshot, width):
    page.set_viewport_size({"width": width, "height": 844})
    page.goto(f"{live_server.url}/accounts/login/")
    assert sideways_overflow(page) <= 0
    screenshot(page, f"login-{width}")
    log_in(page, library["user"])
    for name, path in user_pages(library["video"]).items():
        visit(page, f"{live_server.url}{path}")
        assert page.locator("header.topbar").is_visible()
        shot = screenshot(page, f"{name}-{width}")
        assert sideways_overflow(page) <= 0, f"{name} at {width} px scrolls sideways ({shot})"
        if name == "home":  # measured with its jobs listed, the long names among them
            listed = page.locator("#home-jobs li").evaluate_all("rows => rows.map(r => r.id)")
            assert f"download-{library['video'].pk}" in listed
            assert f"job-{library['segment_job'].public_id}" in listed
    if width == PHONE:
        # The header wraps: its links stay inside the screen, none cut off at the right.
        visit(page, f"{live_server.url}/downloads/")
        right = page.evaluate("""() => Math.max(...[...document.querySelectorAll(
            '.topbar a, .topbar button, .topbar select')].map(e => e.getBoundingClientRect().right))""")
        assert right <= PHONE


@pytest.mark.parametrize("width", [PHONE, LAPTOP])
def test_the_admins_queue_pages_fit_and_show_their_tables(live_server, page, library, staff_user,
                                                          log_in, screenshot, width):
    jobs.set_queue("downloads", concurrency=3, gap_seconds=0)
    # The schedules a new site has (the test database was emptied of the migration's rows),
    # each fired once: its last run is named as django-q2 names tasks.
    import_module("core.migrations.0002_default_schedules").create(apps, None)
    for number, schedule in enumerate(Schedule.objects.all()):
        task = Task.objects.create(id=f"{number:032d}", name="edward-vermont-bakerloo-music",
                                   func=schedule.func, started=timezone.now(),
                                   stopped=timezone.now(), success=number % 2 == 0)
        Schedule.objects.filter(pk=schedule.pk).update(task=task.pk)
    # The widest date the list prints, whatever today is ("Sept. 28, 2026, 12:50 p.m.").
    Schedule.objects.update(next_run=timezone.make_aware(datetime(2026, 9, 28, 12, 50)))
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, staff_user)
    for name, path in admin_pages(library["running_job"]).items():
        visit(page, f"{live_server.url}{path}")
        shot = screenshot(page, f"{name}-{width}")
        assert sideways_overflow(page) <= 0, f"{name} at {width} px scrolls sideways ({shot})"
        if width == LAPTOP:
            # Usable: no table is cut off inside its box on a laptop's screen.
            cut = page.evaluate("""() => [...document.querySelectorAll('.jobs-scroll, .results')]
                .filter(box => box.scrollWidth > box.clientWidth + 1).length""")
            assert cut == 0, f"{name}: a table is wider than the screen ({shot})"
    page.goto(f"{live_server.url}/admin/jobs/job/{library['running_job']}/change/")
    assert page.locator(".job-progress progress").get_attribute("value") == "37"
    assert "downloading" in page.inner_text(".job-progress")
    page.goto(f"{live_server.url}/admin/django_q/schedule/")
    listed = page.inner_text("#result_list")
    assert "forever" in listed
    assert "subscriptions.scheduled.check_due" in listed  # broken only where it wraps


def test_a_refused_edit_is_said_on_the_video_page_and_the_page_still_fits(live_server, page, library,
                                                                          log_in, screenshot):
    page.set_viewport_size({"width": PHONE, "height": 844})
    log_in(page, library["user"])
    downloads = Download.objects.filter(owner=library["user"]).count()
    visit(page, f"{live_server.url}/downloads/{library['video'].pk}/")
    form = page.locator("form.edit-form")
    form.locator("select[name=op]").select_option("trim")
    form.locator("input[name=start_s]").fill("12")
    form.locator("input[name=end_s]").fill("3")
    with page.expect_response(lambda r: r.url.endswith("/edit/")) as answer:
        form.locator("button[type=submit]").click()
    assert answer.value.status == 400
    alert = page.locator("form.edit-form [role=alert]")
    assert "end must come after the start" in alert.inner_text()
    assert form.locator("input[name=start_s]").input_value() == "12"  # what was typed is kept
    shot = screenshot(page, f"video-edit-refused-{PHONE}")
    assert sideways_overflow(page) <= 0, f"the refused edit scrolls sideways ({shot})"
    assert Download.objects.filter(owner=library["user"]).count() == downloads
