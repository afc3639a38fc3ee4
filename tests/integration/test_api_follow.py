"""A script holding only a download id reaches the video's summary and a shot's notes by following
what the documents return: no URL is built here, no internal number guessed."""

import pytest
from django.test import Client

from core.models import ApiToken
from downloads.models import Shot
from insights import conf
from jobs import services as jobs
from tests.integration.test_downloads_pages import ready  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("media_root")]


@pytest.fixture
def script(user):
    _, raw = ApiToken.issue(user=user, name="script")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


@pytest.fixture(autouse=True)
def insights_queue(settings):
    settings.INSIGHTS_GATEWAY_URL = ""  # the local generator
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)


def follow(script, link):
    """Send the request an insight link describes; returns the insight document."""
    request = link["request"]
    assert request["method"] == "POST"
    response = script.post(request["url"], request["body"], content_type="application/json")
    assert response.status_code in (200, 202), response.content
    return response.json()


def test_from_a_download_id_to_its_summary_text_and_a_shots_notes(script, ready,  # noqa: F811
                                                                   run_worker):
    # Measured already (this asset's file is no real video): the notes wait for nothing.
    Shot.objects.bulk_create(Shot(asset=ready.asset, index=i, start_s=i * 5.0, end_s=i * 5.0 + 5,
                                  analysis={"brightness": 0.5, "motion_mean": 0.1})
                             for i in range(2))
    document = script.get(f"/api/downloads/{ready.pk}/").json()
    assert document["asset"]["id"] == ready.asset_id
    summary = document["summary"]
    assert (summary["kind"], summary["subject"]) == ("video_summary", str(document["asset"]["id"]))
    assert summary["url"] is None  # nobody asked yet: reading the download asked for nothing

    asked = follow(script, summary)
    assert asked["status"] == "ready" and asked["priority"] == "interactive"
    assert script.get(f"/api/downloads/{ready.pk}/").json()["summary"]["url"] == asked["url"]

    # The queue names what each job stands for: this one is the insight just asked for.
    entries = script.get("/api/queue/").json()["jobs"]
    entry = next(e for e in entries if e["kind"] == "insights.video_summary")
    assert entry["label"] == "Video summary" and entry["subject"] == "Clip"
    assert entry["for"] == {"type": "insight", "id": asked["id"], "url": asked["url"]}
    assert entry["tier"] == "interactive"
    fetch = next(e for e in entries if e["kind"] == "downloads.fetch")
    assert fetch["label"] == "Download" and fetch["tier"] == "normal"
    assert fetch["for"]["type"] == "download" and fetch["for"]["id"] == str(ready.pk)
    assert script.get(fetch["for"]["url"]).json()["id"] == str(ready.pk)

    shot = script.get(document["asset"]["shots_url"]).json()["shots"][1]
    notes = follow(script, shot["notes"])
    run_worker(queues=[conf.queue()])

    read = script.get(asked["url"]).json()
    assert read["status"] == "successful", read
    assert "Clip" in read["text"]
    notes = script.get(notes["url"]).json()
    assert notes["status"] == "successful" and notes["text"]
    assert script.get(document["asset"]["shots_url"]).json()["shots"][1]["notes"]["status"] == \
        "successful"


def test_another_users_download_leads_nowhere(script, other_user):
    from downloads import services

    theirs = services.download_submit(owner=other_user, url="https://videos.example.com/x.mp4")
    response = script.get(f"/api/downloads/{theirs.pk}/")
    assert response.status_code == 404 and response.json()["error_code"] == "not_found"
    # Their asset as a subject reads as absent too.
    response = script.post("/api/insights/", {"kind": "video_summary", "subject": theirs.asset_id},
                           content_type="application/json")
    assert response.status_code == 404
