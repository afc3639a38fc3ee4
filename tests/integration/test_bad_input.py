"""What bad input gets, at the web's edge: a 4xx with a sentence, never a 500, and nothing
written (issue 18; the fuzz layer in tests/fuzz/ looks for the next such case by itself)."""

import json

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client, RequestFactory
from django.urls import reverse

from core.models import ApiToken
from downloads import services
from downloads.models import Download, DownloadQuota, MediaAsset, Shot
from insights.models import Insight
from jobs.bounds import GAP_SECONDS_MAX, LIMIT_MAX
from jobs.models import ConcurrencyLimit, Job, JobStatus, Queue

pytestmark = pytest.mark.usefixtures("media_root")

URL = "https://videos.example.com/clip.mp4"
NINES = "9" * 25


def post_json(client, path, body, **headers):
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(path, data, content_type="application/json", **headers)


def assert_json_error(response, status, code=None):
    assert response.status_code == status
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    if code:
        assert body["error_code"] == code
    return body


@pytest.fixture
def staff(staff_user):
    client = Client()
    client.force_login(staff_user)
    return client


# --- JSON bodies ------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/api/downloads/", "/api/insights/"])
@pytest.mark.parametrize("body", [
    b"[" * 100_000, b'{"url":' * 100_000, b'{"url": "https://x.example/\\ud800"}',
    b'{"name": "\\ud800", "url": "https://x.example/a"}', b'{"subject": NaN}',
    b'{"kind": "video_summary", "subject": ' + b"9" * 5000 + b"}", b"\xff\xfe",
])
def test_a_body_that_is_no_sane_json_object_is_400_bad_json(alice_client, path, body):
    assert_json_error(post_json(alice_client, path, body), 400, "bad_json")
    assert not Download.objects.exists() and not Insight.objects.exists()


@pytest.mark.parametrize("fields", [{"name": ["x"]}, {"format": ["x"]}, {"url": ["x"]},
                                    {"name": {"a": 1}}, {"url": 7}])
def test_a_download_field_of_the_wrong_type_is_400_and_not_stored(alice_client, fields):
    body = assert_json_error(post_json(alice_client, "/api/downloads/", {"url": URL, **fields}),
                             400, "invalid")
    assert body["field"] == next(iter(fields))
    assert not Download.objects.exists() and not Job.objects.exists()


def test_a_non_utf8_percent_escape_in_the_address_is_400(alice_client):
    body = assert_json_error(post_json(alice_client, "/api/downloads/",
                                       {"url": "https://videos.example.com/%ff%fe"}), 400)
    assert body["errors"]["url"]
    assert not MediaAsset.objects.exists()


@pytest.mark.parametrize(("fields", "field"), [
    ({"priority": ["x"]}, "priority"), ({"priority": {"a": 1}}, "priority"),
    ({"kind": ["video_summary"]}, "kind"), ({"subject": "²"}, "subject"), ({"subject": "٣"}, "subject"),
    ({"subject": "9" * 30}, "subject"),
])
def test_an_insight_field_of_the_wrong_type_or_digits_is_400(alice_client, fields, field):
    body = {"kind": "video_summary", "subject": "1", **fields}
    assert assert_json_error(post_json(alice_client, "/api/insights/", body), 400)["field"] == field
    assert not Insight.objects.exists()


@pytest.mark.parametrize("shot_id", ["²", "٣", "9" * 25, "9" * 5000, "-1"])
def test_a_shot_id_that_is_not_ascii_digits_is_404_json(alice_client, shot_id):
    assert_json_error(alice_client.post(f"/api/shots/{shot_id}/analyze/"), 404, "not_found")
    assert not Shot.objects.exists()


# --- Who may ask ------------------------------------------------------------------

@pytest.mark.parametrize("method", ["post", "delete", "put"])
def test_an_anonymous_unsafe_api_request_is_401_json_not_a_csrf_page(db, method):
    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)("/api/downloads/", json.dumps({"url": URL}),
                                       content_type="application/json")
    assert_json_error(response, 401, "unauthorized")
    assert not Download.objects.exists()


def test_an_unknown_api_address_is_404_json(alice_client):
    assert_json_error(alice_client.get("/api/no-such-thing/"), 404, "not_found")
    assert_json_error(alice_client.get("/api/downloads/x/y/z/"), 404, "not_found")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_a_post_to_a_probe_is_405(db, path):
    assert Client(enforce_csrf_checks=True).post(path).status_code == 405


def test_a_token_opens_the_api_only_never_the_admin_or_pages(staff_user):
    _, raw = ApiToken.issue(user=staff_user)
    token = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    client = Client(enforce_csrf_checks=True)
    assert client.get("/api/downloads/", **token).status_code == 200
    for path in ["/admin/auth/user/", "/admin/", "/downloads/", "/"]:
        response = client.get(path, **token)
        assert response.status_code == 302 and "login" in response["Location"], path
    pause = reverse("admin:jobs_job_queue_operation", args=["default", "pause"])
    assert client.post(pause, **token).status_code in (302, 403)
    assert not Queue.objects.filter(paused=True).exists()
    assert not LogEntry.objects.exists()


# --- Staff's numbers ----------------------------------------------------------------

@pytest.mark.parametrize(("concurrency", "gap"), [
    (NINES, "1"), ("1", "1e308"), ("1", "inf"), ("1", "nan"), ("-1", "1"), ("1", "-1"),
    (str(LIMIT_MAX + 1), "0"), ("0", str(GAP_SECONDS_MAX * 2)), ("²", "0"),
])
def test_queue_limits_out_of_range_are_refused_with_a_message(staff, concurrency, gap):
    Queue.objects.create(name="default", concurrency=2, gap_seconds=1.5)
    response = staff.post(reverse("admin:jobs_job_queue_operation", args=["default", "limits"]),
                          {"default-concurrency": concurrency, "default-gap_seconds": gap},
                          follow=True)
    assert response.status_code == 200
    assert f"from 0 to {LIMIT_MAX}" in response.content.decode()
    row = Queue.objects.get(name="default")
    assert (row.concurrency, row.gap_seconds) == (2, 1.5)


@pytest.mark.parametrize("operation", ["pause", "resume", "limits", "nonsense"])
def test_a_queue_operation_on_an_unknown_queue_is_404_and_creates_nothing(staff, operation):
    path = reverse("admin:jobs_job_queue_operation", args=["no-such-queue", operation])
    assert staff.post(path, {"no-such-queue-concurrency": "1"}).status_code == 404
    assert not Queue.objects.filter(name="no-such-queue").exists()
    unknown = reverse("admin:jobs_job_queue_operation", args=["default", "nonsense"])
    assert staff.post(unknown).status_code == 404


@pytest.mark.parametrize(("path", "fields"), [
    ("admin:jobs_queue_add", {"name": "q", "gap_seconds": "1e308"}),
    ("admin:jobs_queue_add", {"name": "q", "gap_seconds": "0", "concurrency": NINES}),
    ("admin:jobs_concurrencylimit_add", {"key": "user:1", "limit": NINES}),
    ("admin:jobs_concurrencylimit_add", {"key": "user:1", "limit": str(LIMIT_MAX + 1)}),
    ("admin:downloads_downloadquota_add", {"max_concurrent": NINES, "max_queued": "1",
                                           "storage_bytes": "1"}),
    ("admin:downloads_downloadquota_add", {"max_concurrent": "1", "max_queued": NINES,
                                           "storage_bytes": "1"}),
    ("admin:downloads_downloadquota_add", {"max_concurrent": "1", "max_queued": "1",
                                           "storage_bytes": "9" * 30}),
])
def test_admin_forms_refuse_numbers_out_of_range_before_writing(staff, staff_user, path, fields):
    if "user" in path or "quota" in path:
        fields = {"user": str(staff_user.pk), **fields}
    response = staff.post(reverse(path), fields)
    assert response.status_code == 200  # the form again, with its errors
    assert "errornote" in response.content.decode()
    assert not Queue.objects.exists() and not ConcurrencyLimit.objects.exists()
    assert not DownloadQuota.objects.exists()


@pytest.mark.parametrize("page", [NINES, "9" * 5000, "²", "-1", "x"])
def test_up_next_answers_any_page_number(staff, page):
    response = staff.get(reverse("admin:jobs_job_up_next"), {"page": page})
    assert response.status_code == 200


@pytest.mark.parametrize("term", ["9" * 5000, "9" * 25, "²", "٣"])
def test_the_job_list_answers_any_search(staff, term):
    response = staff.get(reverse("admin:jobs_job_changelist"), {"q": term})
    assert response.status_code == 200


# --- Pages --------------------------------------------------------------------------

def test_an_edit_past_any_video_is_refused_and_writes_nothing(alice_client, user, media_root):
    download = services.download_submit(owner=user, url=URL)
    MediaAsset.objects.filter(pk=download.asset_id).update(state="ready", duration_s=10.0,
                                                           file="assets/x/media.mp4")
    (media_root / "assets" / "x").mkdir(parents=True)
    (media_root / "assets" / "x" / "media.mp4").write_bytes(b"\0" * 64)
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL)
    Download.objects.filter(pk=download.pk).update(status="successful")
    assets = MediaAsset.objects.count()
    for end in ["1e300", "1e308", "inf", NINES]:
        response = alice_client.post(f"/downloads/{download.pk}/edit/",
                                     {"op": "trim", "start_s": "1", "end_s": end})
        assert response.status_code == 400, end
        # The page again, its form keeping what was typed and saying what is wrong.
        assert response.context["edit_form"].errors, end
        assert b'role="alert"' in response.content
    assert MediaAsset.objects.count() == assets
    assert Download.objects.filter(owner=user).count() == 1


def test_the_development_static_handler_answers_a_path_out_of_its_folders_with_400(settings):
    from django.core.handlers.wsgi import WSGIHandler

    from core.management.commands.runserver import GuardedStaticFilesHandler

    handler = GuardedStaticFilesHandler(WSGIHandler())
    for path in ["/static/../manage.py", "/static/../../etc/passwd"]:
        assert handler.get_response(RequestFactory().get(path)).status_code == 400, path
    assert handler.get_response(RequestFactory().get("/static/nothing-here.css")).status_code == 404


@pytest.mark.parametrize("path", ["/admin/auth/user/?q=%00", "/admin/jobs/job/?q=a%00b",
                                  "/admin/jobs/queue/%00/change/", "/downloads/?x%00=1"])
def test_a_nul_in_the_path_or_the_query_is_400_before_any_lookup(staff, path):
    assert staff.get(path).status_code == 400


def test_a_nul_in_an_api_query_is_400_json(alice_client):
    assert_json_error(alice_client.get("/api/downloads/?q=%00"), 400, "bad_request")


def test_a_form_body_with_the_csrf_header_is_400_bad_json_not_a_500(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/downloads/")  # the CSRF cookie, as a page load sets it
    token = client.cookies["csrftoken"].value
    # The CSRF check reads a POST's form body first, so the view cannot read it as JSON.
    response = client.post("/api/downloads/", {"url": URL}, HTTP_X_CSRFTOKEN=token)
    assert_json_error(response, 400, "bad_json")
    assert not Download.objects.exists()


@pytest.mark.parametrize("target", ["0", "home", "downloads:list", "..", "%ff"])
def test_a_next_that_looks_like_a_view_name_is_followed_as_a_url(alice_client, target):
    response = alice_client.post("/insights/retry-failed/", {"next": target})
    assert response.status_code == 302


@pytest.mark.parametrize("path", ["admin:jobs_queue_change", "admin:jobs_queue_delete"])
def test_an_empty_to_field_on_an_admin_page_is_400(staff, path):
    Queue.objects.create(name="q")
    url = reverse(path, args=["q"])
    assert staff.get(url, {"_to_field": ""}).status_code == 400
    assert staff.post(url, {"_to_field": "", "name": "q", "post": "yes"}).status_code == 400
    assert Queue.objects.filter(name="q").exists()
