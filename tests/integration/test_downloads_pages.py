"""The download pages: the list and its form, the polling row, actions, the player, the file."""

import pytest

from downloads import services
from downloads.models import Download, DownloadQuota, MediaAsset
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.usefixtures("media_root")

URL = "https://videos.example.com/clip.mp4"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def ready(user, media_root):
    """A finished download of a 1,000-byte 'video' whose bytes are their own offsets mod 251."""
    download = services.download_submit(owner=user, url=URL)
    asset = download.asset
    folder = media_root / "assets" / str(asset.pk)
    folder.mkdir(parents=True)
    (folder / "media.mp4").write_bytes(bytes(i % 251 for i in range(1000)))
    MediaAsset.objects.filter(pk=asset.pk).update(
        state="ready", file=f"assets/{asset.pk}/media.mp4", size_bytes=1000, title="Clip",
        duration_s=2.0)
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL, progress=1.0)
    Download.objects.filter(pk=download.pk).update(status="successful")
    return Download.objects.get(pk=download.pk)


def test_the_list_shows_the_form_and_the_users_downloads_only(alice_client, user, other_user):
    services.download_submit(owner=user, url=URL, name="Mine")
    services.download_submit(owner=other_user, url=URL, name="Theirs")
    page = alice_client.get("/downloads/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'name="url"' in text and "Mine" in text and "Theirs" not in text


def test_submitting_the_form_queues_a_download(alice_client, user):
    response = alice_client.post("/downloads/", {"url": URL, "format": "audio"})
    assert response.status_code == 302
    download = Download.objects.get()
    assert download.owner == user and download.asset.format == "audio"
    assert download.job.status == JobStatus.READY


def test_a_hostile_url_in_the_form_is_refused_with_its_reason(alice_client):
    response = alice_client.post("/downloads/", {"url": "http://192.168.1.1/x", "format": "best"})
    assert response.status_code == 400
    assert "private or local networks" in response.content.decode()
    assert not Job.objects.exists()


def test_over_the_cap_the_form_says_so(alice_client, user):
    DownloadQuota.objects.create(user=user, max_queued=1)
    alice_client.post("/downloads/", {"url": URL, "format": "best"})
    response = alice_client.post("/downloads/", {"url": URL + "?2", "format": "best"})
    assert response.status_code == 429
    assert "You already have 1 downloads" in response.content.decode()


def test_a_live_row_polls_and_a_finished_row_stops(alice_client, user, ready):
    live = services.download_submit(owner=user, url=URL + "?live")
    row = alice_client.get(f"/downloads/{live.pk}/row/").content.decode()
    assert 'hx-trigger="every 1s"' in row and f'hx-get="/downloads/{live.pk}/row/"' in row
    done = alice_client.get(f"/downloads/{ready.pk}/row/").content.decode()
    assert "hx-trigger" not in done and "hx-get" not in done
    assert 'aria-valuenow="100"' in done


def test_a_running_row_shows_its_figures(alice_client, user):
    download = services.download_submit(owner=user, url=URL)
    Job.objects.filter(pk=download.job_id).update(
        status=JobStatus.RUNNING, progress=0.25, phase="downloading",
        progress_message='{"b":2621440,"t":10485760,"s":1048576.0,"e":75}')
    row = alice_client.get(f"/downloads/{download.pk}/row/").content.decode()
    for text in ("25%", "2.5\xa0MB of 10.0\xa0MB", "1.0\xa0MB/s", "1 min 15 s left", "Pause",
                 "Cancel"):
        assert text in row, text


def test_htmx_actions_return_the_row_and_say_when_they_no_longer_apply(alice_client, user):
    download = services.download_submit(owner=user, url=URL)
    paused = alice_client.post(f"/downloads/{download.pk}/pause/", **HTMX).content.decode()
    assert 'data-status="paused"' in paused and "Resume" in paused
    again = alice_client.post(f"/downloads/{download.pk}/pause/", **HTMX)
    assert again.status_code == 200
    assert "Only a queued or running" in again.content.decode()
    cancelled = alice_client.post(f"/downloads/{download.pk}/cancel/", **HTMX).content.decode()
    assert "This download was cancelled." in cancelled and "Retry" in cancelled
    assert "hx-trigger" not in cancelled


def test_deleting_the_last_download_of_an_asset_deletes_its_file(alice_client, ready, media_root):
    path = media_root / ready.asset.file
    assert path.exists()
    response = alice_client.post(f"/downloads/{ready.pk}/delete/", **HTMX)
    assert response.status_code == 200 and response.content == b""
    assert not Download.objects.exists()
    assert not path.exists()
    asset = MediaAsset.objects.get()
    assert asset.state == "pending" and asset.file == ""


def test_another_users_pages_are_404(client, other_user, ready):
    client.force_login(other_user)
    for path in ("", "row/", "file/"):
        assert client.get(f"/downloads/{ready.pk}/{path}").status_code == 404
    assert client.post(f"/downloads/{ready.pk}/cancel/").status_code == 404
    assert client.post(f"/downloads/{ready.pk}/delete/").status_code == 404
    assert Download.objects.filter(pk=ready.pk).exists()


def test_the_player_page_plays_the_file(alice_client, ready):
    page = alice_client.get(f"/downloads/{ready.pk}/").content.decode()
    assert f'<video id="player" controls preload="metadata" src="/downloads/{ready.pk}/file/"' in page
    assert "Make an edit" in page


class TestFile:
    def get(self, client, ready, **headers):
        response = client.get(f"/downloads/{ready.pk}/file/", **headers)
        self.opened.append(response)
        return response

    @pytest.fixture(autouse=True)
    def close_responses(self, db):
        self.opened = []
        yield
        for response in self.opened:
            response.close()  # a file response holds the file open until closed

    def body(self, response):
        return b"".join(response.streaming_content)

    def test_whole_file(self, alice_client, ready):
        response = self.get(alice_client, ready)
        assert response.status_code == 200
        assert response["Accept-Ranges"] == "bytes" and response["Content-Length"] == "1000"
        assert response["Content-Type"] == "video/mp4"
        assert self.body(response) == bytes(i % 251 for i in range(1000))

    @pytest.mark.parametrize(("header", "start", "end"), [
        ("bytes=0-0", 0, 0), ("bytes=10-19", 10, 19), ("bytes=990-", 990, 999),
        ("bytes=-5", 995, 999), ("bytes=900-5000", 900, 999),
    ])
    def test_ranges_are_206_with_exactly_those_bytes(self, alice_client, ready, header, start, end):
        response = self.get(alice_client, ready, HTTP_RANGE=header)
        assert response.status_code == 206
        assert response["Content-Range"] == f"bytes {start}-{end}/1000"
        assert response["Content-Length"] == str(end - start + 1)
        assert self.body(response) == bytes(i % 251 for i in range(start, end + 1))

    def test_a_range_past_the_end_is_416(self, alice_client, ready):
        response = self.get(alice_client, ready, HTTP_RANGE="bytes=1000-")
        assert response.status_code == 416
        assert response["Content-Range"] == "bytes */1000"

    @pytest.mark.parametrize(("header", "status", "content_range"), [
        ("bytes=" + "9" * 5000 + "-", 416, "bytes */1000"),  # past Python's int-string limit
        ("bytes=0-" + "9" * 5000, 206, "bytes 0-999/1000"),
        ("bytes=-" + "9" * 5000, 206, "bytes 0-999/1000"),
        ("bytes=" + "0" * 5000 + "1-1", 206, "bytes 1-1/1000"),
        ("bytes=²-", 200, None),  # not an ASCII digit: no range at all
    ])
    def test_a_range_of_thousands_of_digits_or_other_digits_is_answered(
            self, alice_client, ready, header, status, content_range):
        response = self.get(alice_client, ready, HTTP_RANGE=header)
        assert response.status_code == status
        assert response.get("Content-Range") == content_range

    def test_several_ranges_or_a_stale_if_range_get_the_whole_file(self, alice_client, ready):
        assert self.get(alice_client, ready, HTTP_RANGE="bytes=0-1,5-6").status_code == 200
        etag = self.get(alice_client, ready)["ETag"]
        fresh = self.get(alice_client, ready, HTTP_RANGE="bytes=0-9", HTTP_IF_RANGE=etag)
        assert fresh.status_code == 206
        stale = self.get(alice_client, ready, HTTP_RANGE="bytes=0-9", HTTP_IF_RANGE='"old"')
        assert stale.status_code == 200

    def test_head_and_download_disposition(self, alice_client, ready):
        head = alice_client.head(f"/downloads/{ready.pk}/file/", HTTP_RANGE="bytes=0-9")
        assert head.status_code == 206 and head["Content-Length"] == "10"
        saved = alice_client.get(f"/downloads/{ready.pk}/file/?download=1")
        saved.close()
        assert saved["Content-Disposition"] == "attachment; filename*=UTF-8''Clip.mp4"

    def test_no_file_until_the_download_has_finished(self, alice_client, user):
        queued = services.download_submit(owner=user, url=URL + "?q")
        assert alice_client.get(f"/downloads/{queued.pk}/file/").status_code == 404
