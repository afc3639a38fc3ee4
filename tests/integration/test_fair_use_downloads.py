"""Fair use of downloads and CV work: per-user caps on queued and running shot detections and
analyses (from the user's quota), a cap on shots one "Analyse all shots" queues, and a rate of
downloads asked for that counts those served at once from the cache."""

import pytest
from django.test import Client

from downloads import services, shots
from downloads.models import DownloadQuota, MediaAsset, Shot
from jobs.models import ConcurrencyLimit, Job
from tests.integration.test_downloads_shots import local_mode, video  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def many_shots(video):  # noqa: F811
    Shot.objects.bulk_create(Shot(asset=video.asset, index=i, start_s=float(i), end_s=i + 1.0)
                             for i in range(30))
    return list(Shot.objects.filter(asset=video.asset).order_by("index"))


def analyse(client, shot):
    return client.post(f"/api/shots/{shot.pk}/analyze/")


def test_a_users_cv_requests_stop_at_their_quotas_cap(many_shots, owner, client_of):
    services.quota_save(DownloadQuota(user=owner, max_queued_cv=3, max_concurrent_cv=1))
    answers = [analyse(client_of, shot).status_code for shot in many_shots[:5]]
    assert answers == [202, 202, 202, 429, 429]
    refused = analyse(client_of, many_shots[4]).json()
    assert refused["error_code"] == "queue_full" and refused["limit"] == 3
    assert analyse(client_of, many_shots[0]).status_code == 202  # its live job, not a new one
    assert Job.objects.filter(kind="downloads.analyze").count() == 3

    # They run one at a time behind the user's own key, at the quota's limit.
    key = f"cv-user:{owner.pk}"
    assert all(job.concurrency_keys == [key]
               for job in Job.objects.filter(kind="downloads.analyze"))
    assert ConcurrencyLimit.objects.get(key=key).limit == 1
    services.quota_save(DownloadQuota(user=owner, max_queued_cv=3, max_concurrent_cv=2))
    assert ConcurrencyLimit.objects.get(key=key).limit == 2


def test_analyse_all_queues_at_most_the_per_request_cap(many_shots, video, owner, client_of,  # noqa: F811
                                                         settings):
    settings.DOWNLOADS_SHOTS_PER_REQUEST = 5
    response = client_of.post(f"/downloads/{video.pk}/shots/analyze/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    queued = Job.objects.filter(kind="downloads.analyze").order_by("pk")
    assert [job.payload["shot"] for job in queued] == [shot.pk for shot in many_shots[:5]]


def test_analyse_all_stops_at_the_users_cap_and_says_so(many_shots, video, owner, client_of):  # noqa: F811
    services.quota_save(DownloadQuota(user=owner, max_queued_cv=4))
    assert shots.shots_analyze_all(video.asset, owner=owner) == 4
    response = client_of.post(f"/downloads/{video.pk}/shots/analyze/", HTTP_HX_REQUEST="true")
    assert "shot detections and analyses queued or running" in response.content.decode()
    assert Job.objects.filter(kind="downloads.analyze").count() == 4


def test_the_engines_own_follow_up_is_not_refused(video, owner):  # noqa: F811
    services.quota_save(DownloadQuota(user=owner, max_queued_cv=1))
    other = Shot.objects.create(asset=video.asset, index=99, start_s=1.0, end_s=2.0)
    shots.shot_analyze(other, owner=owner)  # the cap is now full
    MediaAsset.objects.filter(pk=video.asset_id).update(segment_job=None)
    job = shots.asset_segment(video.asset, owner=owner, check_transport=False, capped=False)
    assert job.kind == "downloads.segment"


def test_cache_hits_count_against_the_rate_like_any_download(video, owner, client_of, settings):  # noqa: F811
    """A finished asset serves new downloads of its URL at once; a burst of them is refused as a
    burst of fetches would be."""
    settings.DOWNLOADS_DEFAULT_RATE = "3/m"
    url = video.asset.url
    answers = [client_of.post("/api/downloads/", {"url": url}, content_type="application/json")
               for _ in range(2)]  # the fixture's own download was the first of the period
    assert [a.status_code for a in answers] == [201, 201]
    assert {a.json()["status"] for a in answers} == {"successful"}  # from the cache
    refused = client_of.post("/api/downloads/", {"url": url}, content_type="application/json")
    assert refused.status_code == 429 and refused.json()["error_code"] == "rate_limited"

    # Another user's rate is their own.
    other = Client()
    other.force_login(type(owner).objects.create_user("walt"))
    assert other.post("/api/downloads/", {"url": url},
                      content_type="application/json").status_code == 201


def test_an_unlimited_quota_has_no_rate(video, owner, client_of, settings):  # noqa: F811
    settings.DOWNLOADS_DEFAULT_RATE = "1/m"
    services.quota_save(DownloadQuota(user=owner, unlimited=True))
    for _ in range(3):
        assert client_of.post("/api/downloads/", {"url": video.asset.url},
                              content_type="application/json").status_code == 201
