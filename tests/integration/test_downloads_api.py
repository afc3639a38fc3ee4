"""The downloads JSON API: authentication, ownership, status codes, and reads that never write."""

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.models import ApiToken
from downloads import services
from downloads.models import Download, DownloadQuota, MediaAsset
from jobs import services as jobs
from jobs.models import ConcurrencyLimit, Job, JobStatus

pytestmark = pytest.mark.usefixtures("media_root")

URL = "https://videos.example.com/watch/clip.mp4"


def post(client, path, data=None, **headers):
    body = data if isinstance(data, (bytes, str)) else json.dumps(data or {})
    return client.post(path, body, content_type="application/json", **headers)


def submit(client, url=URL, *, headers=None, **fields):
    return post(client, "/api/downloads/", {"url": url, **fields}, **(headers or {}))


# --- Authentication and ownership -------------------------------------------------

def test_anonymous_requests_get_401_json(client, db):
    for response in (client.get("/api/downloads/"), submit(client)):
        assert response.status_code == 401
        assert response.json()["error_code"] == "unauthorized"
    assert not Download.objects.exists()


def test_a_bearer_token_works_without_csrf(db, user):
    _, raw = ApiToken.issue(user=user)
    client = Client(enforce_csrf_checks=True)
    response = submit(client, headers={"HTTP_AUTHORIZATION": f"Bearer {raw}"})
    assert response.status_code == 201
    listed = client.get("/api/downloads/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert [d["id"] for d in listed.json()["downloads"]] == [response.json()["id"]]


def test_a_session_needs_the_csrf_token(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    refused = submit(client)
    assert refused.status_code == 403
    assert refused.json()["error_code"] == "csrf_failed"  # JSON, like every API answer
    assert client.post("/downloads/", {"url": URL}).status_code == 403  # pages keep Django's
    client.get("/downloads/")  # sets the CSRF cookie, as a page load would
    token = client.cookies["csrftoken"].value
    assert submit(client, headers={"HTTP_X_CSRFTOKEN": token}).status_code == 201


def test_another_users_download_is_404_everywhere(alice_client, other_user):
    theirs = services.download_submit(owner=other_user, url=URL)
    base = f"/api/downloads/{theirs.pk}/"
    assert alice_client.get(base).status_code == 404
    assert alice_client.delete(base).status_code == 404
    for action in ("pause", "resume", "cancel", "retry"):
        response = post(alice_client, base + action)
        assert response.status_code == 404
        assert response.json()["error_code"] == "not_found"
    assert alice_client.get("/api/downloads/not-a-uuid/").status_code == 404
    assert alice_client.get("/api/downloads/").json() == {"downloads": []}
    theirs.refresh_from_db()
    assert theirs.job.status == JobStatus.READY


# --- Submitting ------------------------------------------------------------------------

def test_post_creates_a_download_and_its_job(alice_client, user):
    response = submit(alice_client, format="720p", name="Holiday")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["status"] == "ready"
    assert data["format"] == "720p" and data["name"] == "Holiday"
    assert data["actions"] == ["pause", "cancel"]
    assert response["Location"].endswith(f"/api/downloads/{data['id']}/")
    download = Download.objects.get(pk=data["id"])
    job = download.job
    assert job.kind == "downloads.fetch" and job.queue == "downloads"
    assert job.owner == user
    assert job.unique_key == f"download:{download.pk}"
    site = job.payload["site"]  # the URL's registrable domain: its own limits
    assert job.concurrency_keys == sorted([f"user:{user.pk}", f"asset:{download.asset_id}",
                                           f"site:{site}"])
    assert job.rate_key == f"site:{site}"
    assert job.max_attempts == 3
    assert ConcurrencyLimit.objects.get(key=f"user:{user.pk}").limit == 2
    assert ConcurrencyLimit.objects.get(key=f"asset:{download.asset_id}").limit == 1
    detail = alice_client.get(f"/api/downloads/{data['id']}/").json()
    assert detail["queue_position"] == 1
    assert detail["waiting_code"] == "no_worker"
    assert detail["progress"] is None and detail["error"] is None


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"a string"', b""])
def test_bad_json_is_400(alice_client, body):
    response = post(alice_client, "/api/downloads/", body)
    assert response.status_code == 400
    assert response.json()["error_code"] == "bad_json"
    assert not Job.objects.exists()


@pytest.mark.parametrize("url", [
    "file:///etc/passwd", "--exec=touch /tmp/x", "ytsearch:cats", "http://user:pw@example.com/v",
    "http://127.0.0.1:8000/v.mp4", "http://localhost/v.mp4", "http://10.0.0.8/v.mp4",
    "https://example.com/" + "a" * 3000, "", None,
])
def test_hostile_urls_are_400_with_a_field_message_and_no_job(alice_client, url):
    response = submit(alice_client, url=url)
    assert response.status_code == 400
    data = response.json()
    assert data["error_code"] == "invalid"
    assert data["errors"]["url"][0]
    assert not Job.objects.exists() and not MediaAsset.objects.exists()


def test_an_unknown_format_is_400(alice_client):
    response = submit(alice_client, format="8k-hdr")
    assert response.status_code == 400
    assert "format" in response.json()["errors"]


def test_over_the_queued_cap_is_429_and_writes_nothing(alice_client, user):
    DownloadQuota.objects.create(user=user, max_queued=2)
    assert submit(alice_client, url=URL + "?1").status_code == 201
    assert submit(alice_client, url=URL + "?2").status_code == 201
    response = submit(alice_client, url=URL + "?3")
    assert response.status_code == 429
    assert response.json()["error_code"] == "queue_full"
    assert "2" in response.json()["error"]
    assert Download.objects.count() == 2 and Job.objects.count() == 2
    # A finished one frees its place.
    services.download_cancel(Download.objects.first())
    assert submit(alice_client, url=URL + "?3").status_code == 201


def test_the_same_url_shares_one_asset_and_a_ready_one_finishes_at_once(alice_client, user,
                                                                        other_user, media_root):
    first = services.download_submit(owner=other_user, url=URL)
    asset = first.asset
    assert submit(alice_client, url=URL.replace("https://videos.", "HTTPS://VIDEOS.")
                  ).json()["status"] == "ready"
    assert MediaAsset.objects.count() == 1
    (media_root / "assets" / str(asset.pk)).mkdir(parents=True)
    (media_root / "assets" / str(asset.pk) / "media.mp4").write_bytes(b"\0" * 1000)
    MediaAsset.objects.filter(pk=asset.pk).update(state="ready", file=f"assets/{asset.pk}/media.mp4",
                                                   size_bytes=1000, title="Clip")
    data = submit(alice_client).json()
    assert data["status"] == "successful"
    assert data["asset"]["size_bytes"] == 1000
    assert data["asset"]["file_url"].endswith(f"/downloads/{data['id']}/file/")
    assert Download.objects.get(pk=data["id"]).job is None  # no job was needed
    # Another user whose storage is too small is refused at once.
    small = other_user
    DownloadQuota.objects.create(user=small, storage_bytes=999)
    refused = services.download_submit(owner=small, url=URL)
    assert refused.status == "failed" and refused.error_code == "quota"


# --- Actions -----------------------------------------------------------------------------

def test_actions_follow_the_lifecycle_and_illegal_ones_are_409(alice_client):
    data = submit(alice_client).json()
    base = f"/api/downloads/{data['id']}/"
    assert post(alice_client, base + "pause").json()["status"] == "paused"
    assert post(alice_client, base + "pause/").status_code == 409
    assert post(alice_client, base + "resume").json()["status"] == "ready"
    response = post(alice_client, base + "retry")
    assert response.status_code == 409
    assert response.json()["error_code"] == "illegal_transition"
    assert response.json()["status"] == "ready"
    cancelled = post(alice_client, base + "cancel").json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["error_code"] == "cancelled" and cancelled["error"]
    assert Download.objects.get(pk=data["id"]).status == "cancelled"  # the copied final state
    assert post(alice_client, base + "resume").status_code == 409
    retried = post(alice_client, base + "retry").json()
    assert retried["status"] == "ready" and retried["error"] is None
    assert alice_client.get(base + "pause").status_code == 405
    assert alice_client.delete(base).status_code == 204
    assert alice_client.get(base).status_code == 404
    assert Job.objects.get().status == JobStatus.CANCELLED  # a deleted download's job is cancelled


def test_a_pruned_job_leaves_the_download_and_its_final_state(alice_client):
    data = submit(alice_client).json()
    post(alice_client, f"/api/downloads/{data['id']}/cancel")
    Job.objects.all().delete()
    again = alice_client.get(f"/api/downloads/{data['id']}/").json()
    assert again["status"] == "cancelled" and again["error_code"] == "cancelled"
    assert again["actions"] == ["retry", "delete"]
    assert post(alice_client, f"/api/downloads/{data['id']}/retry").json()["status"] == "ready"


def test_staff_quota_edits_reach_the_concurrency_key(user):
    services.download_submit(owner=user, url=URL)
    assert ConcurrencyLimit.objects.get(key=f"user:{user.pk}").limit == 2
    quota = DownloadQuota(user=user, max_concurrent=5)
    services.quota_save(quota)
    assert ConcurrencyLimit.objects.get(key=f"user:{user.pk}").limit == 5
    quota.unlimited = True
    services.quota_save(quota)
    assert ConcurrencyLimit.objects.get(key=f"user:{user.pk}").limit >= 1000


# --- Reads never write ----------------------------------------------------------------------

WRITES = ("INSERT", "UPDATE", "DELETE")


def test_a_storm_of_status_reads_writes_nothing(alice_client, user):
    ids = [submit(alice_client, url=f"{URL}?{i}").json()["id"] for i in range(4)]
    post(alice_client, f"/api/downloads/{ids[1]}/pause")
    post(alice_client, f"/api/downloads/{ids[2]}/cancel")
    running = Download.objects.get(pk=ids[3]).job
    Job.objects.filter(pk=running.pk).update(status=JobStatus.RUNNING, progress=0.5, phase="downloading",
                                             progress_message='{"b":5,"t":10,"s":2.0,"e":2.5}')
    before = {job.pk: job.updated_at for job in Job.objects.all()}
    downloads_before = list(Download.objects.order_by("pk").values())
    with CaptureQueriesContext(connection) as queries:
        for _ in range(10):
            assert alice_client.get("/api/downloads/").status_code == 200
            for download_id in ids:
                assert alice_client.get(f"/api/downloads/{download_id}/").status_code == 200
            assert alice_client.get(f"/downloads/{ids[0]}/row/").status_code == 200
            assert alice_client.get("/downloads/").status_code == 200
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]
    assert writes == []
    assert {job.pk: job.updated_at for job in Job.objects.all()} == before
    assert list(Download.objects.order_by("pk").values()) == downloads_before
    shown = alice_client.get(f"/api/downloads/{ids[3]}/").json()
    assert (shown["status"], shown["progress"], shown["bytes_done"], shown["bytes_total"],
            shown["speed_bytes_s"], shown["eta_s"]) == ("running", 0.5, 5, 10, 2.0, 2.5)


# --- Waiting reasons ---------------------------------------------------------------------

def test_waiting_reasons_name_the_users_own_downloads_and_a_shared_asset(alice_client, user,
                                                                        other_user):
    from jobs.models import Worker

    Worker.objects.create(name="w", host="h", pid=1, kinds=["downloads.fetch"])
    mine = [services.download_submit(owner=user, url=f"{URL}?{i}") for i in range(3)]
    Job.objects.filter(pk__in=[d.job_id for d in mine[:2]]).update(status=JobStatus.RUNNING)
    third = alice_client.get(f"/api/downloads/{mine[2].pk}/").json()
    assert third["waiting_code"] == "key_busy"
    assert third["waiting_reason"] == "Your other downloads are running."
    theirs = services.download_submit(owner=other_user, url=f"{URL}?0")
    Job.objects.filter(pk=mine[0].job_id).update(status=JobStatus.READY)
    Job.objects.filter(pk=theirs.job_id).update(status=JobStatus.RUNNING)
    shared = alice_client.get(f"/api/downloads/{mine[0].pk}/").json()
    assert shared["waiting_reason"] == "The same video is downloading for someone else."
    jobs.set_queue("downloads", paused=True)
    assert alice_client.get(f"/api/downloads/{mine[0].pk}/").json()["waiting_code"] == "queue_paused"
