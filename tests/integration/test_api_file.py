"""A script holding a bearer token fetches a finished download's file from the URL its document
gives: whole, a range, HEAD; anyone else, and a download without a file, gets the API's error
document."""

import pytest
from django.test import Client
from django.utils import timezone

from core.models import ApiToken
from downloads import services
from downloads.models import Download
from tests.integration.test_downloads_pages import URL, ready  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("media_root")

CONTENT = bytes(i % 251 for i in range(1000))  # what `ready` stored


def script_of(user):
    """A client that sends only the user's token: no session, no cookie."""
    _, raw = ApiToken.issue(user=user, name="script")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture
def script(user):
    return script_of(user)


@pytest.fixture
def file_url(script, ready):  # noqa: F811
    """The file's address as the download's document gives it."""
    return script.get(f"/api/downloads/{ready.pk}/").json()["asset"]["file_url"]


def body(response):
    # Reading a streamed body to its end closes the file the response holds.
    return b"".join(response.streaming_content)


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    document = response.json()
    assert document["error_code"] == code and document["error"], document
    return document


def test_the_document_links_the_api_route_and_the_token_fetches_the_whole_file(
        script, ready, file_url):  # noqa: F811
    assert file_url == f"http://testserver/api/downloads/{ready.pk}/file/"
    response = script.get(file_url)
    assert response.status_code == 200
    assert response["Content-Type"] == "video/mp4" and response["Content-Length"] == "1000"
    assert response["Accept-Ranges"] == "bytes"
    assert response["Content-Disposition"] == "inline; filename*=UTF-8''Clip.mp4"
    assert body(response) == CONTENT
    saved = script.get(file_url + "?download=1")
    assert saved["Content-Disposition"] == "attachment; filename*=UTF-8''Clip.mp4"
    assert body(saved) == CONTENT


@pytest.mark.parametrize(("header", "start", "end"), [
    ("bytes=100-199", 100, 199), ("bytes=990-", 990, 999), ("bytes=-5", 995, 999),
    ("bytes=900-5000", 900, 999),
])
def test_a_range_is_206_with_exactly_those_bytes(script, file_url, header, start, end):
    response = script.get(file_url, HTTP_RANGE=header)
    assert response.status_code == 206
    assert response["Content-Range"] == f"bytes {start}-{end}/1000"
    assert response["Content-Length"] == str(end - start + 1)
    assert body(response) == CONTENT[start:end + 1]


def test_a_resumed_fetch_gets_the_rest_only_of_the_same_file(script, file_url):
    first = script.get(file_url, HTTP_RANGE="bytes=0-499")
    assert body(first) == CONTENT[:500]
    rest = script.get(file_url, HTTP_RANGE="bytes=500-", HTTP_IF_RANGE=first["ETag"])
    assert rest.status_code == 206 and body(rest) == CONTENT[500:]
    changed = script.get(file_url, HTTP_RANGE="bytes=500-", HTTP_IF_RANGE='"another file"')
    assert changed.status_code == 200 and body(changed) == CONTENT


def test_head_answers_the_headers_without_the_bytes(script, file_url):
    whole = script.head(file_url)
    assert whole.status_code == 200 and whole["Content-Length"] == "1000"
    assert whole["Content-Type"] == "video/mp4" and whole["ETag"]
    assert whole.content == b""
    part = script.head(file_url, HTTP_RANGE="bytes=0-9")
    assert part.status_code == 206 and part["Content-Length"] == "10"
    assert part["Content-Range"] == "bytes 0-9/1000" and body(part) == b""


def test_a_range_outside_the_file_is_416_with_the_files_size(script, file_url):
    refused = script.get(file_url, HTTP_RANGE="bytes=1000-")
    assert_error(refused, 416, "range_not_satisfiable")
    assert refused["Content-Range"] == "bytes */1000"


@pytest.mark.parametrize("header", [
    "bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=5-1", "bytes=²-", "bytes=0-1,5-6",
    "items=0-9", "bytes=-0", "bytes=-", "garbage",
])
def test_odd_ranges_are_answered_never_a_server_error(script, file_url, header):
    response = script.get(file_url, HTTP_RANGE=header)
    if response.status_code == 416:
        assert_error(response, 416, "range_not_satisfiable")
    else:
        assert response.status_code in (200, 206)
        assert CONTENT.endswith(body(response))


def test_another_users_token_gets_the_404_of_a_download_that_does_not_exist(
        other_user, ready):  # noqa: F811
    stranger = script_of(other_user)
    theirs = stranger.get(f"/api/downloads/{ready.pk}/file/")
    missing = stranger.get("/api/downloads/00000000-0000-0000-0000-000000000000/file/")
    assert assert_error(theirs, 404, "not_found") == assert_error(missing, 404, "not_found")
    assert stranger.head(f"/api/downloads/{ready.pk}/file/").status_code == 404


@pytest.mark.parametrize("download_id", ["not-a-uuid", "9" * 5000, "%ff", "%C2%B2", "-1"])
def test_an_id_that_is_no_download_is_404(script, download_id):
    assert_error(script.get(f"/api/downloads/{download_id}/file/"), 404, "not_found")


def test_no_token_is_401_with_the_challenge(ready):  # noqa: F811
    response = Client().get(f"/api/downloads/{ready.pk}/file/")
    assert_error(response, 401, "unauthorized")
    assert response["WWW-Authenticate"] == 'Bearer realm="haulage"'


def test_a_revoked_token_is_401(user, ready):  # noqa: F811
    token, raw = ApiToken.issue(user=user)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert body(client.get(f"/api/downloads/{ready.pk}/file/")) == CONTENT
    token.revoked_at = timezone.now()
    token.save()
    response = client.get(f"/api/downloads/{ready.pk}/file/")
    assert_error(response, 401, "unauthorized")
    assert response["WWW-Authenticate"] == 'Bearer realm="haulage"'


def test_a_download_not_yet_finished_has_no_file_url_and_its_file_is_409(script, user):
    queued = services.download_submit(owner=user, url=URL + "?queued")
    assert script.get(f"/api/downloads/{queued.pk}/").json()["asset"]["file_url"] is None
    refused = assert_error(script.get(f"/api/downloads/{queued.pk}/file/"), 409,
                           "illegal_transition")
    assert refused["status"] == "ready" and refused["error"] == "The download has not finished yet."
    assert script.head(f"/api/downloads/{queued.pk}/file/").status_code == 409


def test_an_evicted_downloads_file_is_409_and_says_how_to_get_it_back(script, ready,  # noqa: F811
                                                                       file_url):
    assert services.asset_evict(ready.asset_id) == "evicted"
    refused = assert_error(script.get(file_url), 409, "illegal_transition")
    assert refused["status"] == "evicted" and "download again" in refused["error"]


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "options"])
def test_the_file_only_reads(script, ready, file_url, method):  # noqa: F811
    response = getattr(script, method)(file_url)
    assert_error(response, 405, "method_not_allowed")
    assert Download.objects.filter(pk=ready.pk).exists()


def test_the_page_route_stays_the_browsers_and_ignores_tokens(alice_client, ready,  # noqa: F811
                                                              script):
    page = f"/downloads/{ready.pk}/file/"
    assert body(alice_client.get(page)) == CONTENT
    # A token opens only the API: on the page route it is no login at all.
    assert script.get(page).status_code == 302
