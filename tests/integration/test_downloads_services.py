"""Assets and quotas: one fetch per asset, partial files kept or dropped, storage charged once."""

import threading
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from downloads import fetch, selectors, services, storage
from downloads.errors import NetworkFailed, QuotaExceeded, Unavailable
from downloads.models import Download, DownloadQuota, MediaAsset
from jobs.models import Job, JobStatus, Outcome

pytestmark = pytest.mark.usefixtures("media_root")

URL = "https://videos.example.com/clip.mp4"


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice")


@pytest.fixture
def other_user(db):
    return get_user_model().objects.create_user("bob")


def partial(asset_id):
    folder = storage.staging_dir(asset_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "media.mp4.part").write_bytes(b"x" * 100)
    return folder


def make_ready(asset, size):
    folder = storage.asset_dir(asset.pk)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "media.mp4").write_bytes(b"\0" * size)
    MediaAsset.objects.filter(pk=asset.pk).update(state="ready", file=f"assets/{asset.pk}/media.mp4",
                                                   size_bytes=size)


@pytest.mark.django_db(transaction=True)
def test_exactly_one_of_many_racing_attempts_claims_an_asset():
    tokens = []
    for i in range(8):
        owner = get_user_model().objects.create_user(f"racer{i}")
        download = services.download_submit(owner=owner, url=URL)
        tokens.append(uuid.uuid4())
        Job.objects.filter(pk=download.job_id).update(status=JobStatus.RUNNING,
                                                     lease_token=tokens[-1])
    asset = download.asset
    won, barrier = [], threading.Barrier(len(tokens))

    def claim(token):
        barrier.wait()
        try:
            if services.asset_claim(asset.pk, token):
                won.append(token)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(t,)) for t in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    asset.refresh_from_db()
    assert asset.state == "downloading" and asset.holder == won[0]


def test_a_holder_whose_attempt_is_gone_can_be_replaced(user):
    download = services.download_submit(owner=user, url=URL)
    running = uuid.uuid4()
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.RUNNING, lease_token=running)
    assert services.asset_claim(download.asset_id, running)
    assert not services.asset_claim(download.asset_id, uuid.uuid4())  # its attempt still runs
    Job.objects.filter(pk=download.job_id).update(status=JobStatus.READY, lease_token=None)
    assert services.asset_claim(download.asset_id, uuid.uuid4())  # a dead holder is replaced


def test_release_keeps_or_drops_the_partial_by_reason(user, other_user):
    mine = services.download_submit(owner=user, url=URL)
    asset_id, token = mine.asset_id, uuid.uuid4()

    def hold():
        assert services.asset_claim(asset_id, token)
        return partial(asset_id)

    folder = hold()
    assert not services.asset_release(asset_id, uuid.uuid4())  # not the holder: nothing changes
    assert services.asset_release(asset_id, token, partial="keep")  # a pause
    assert folder.exists() and MediaAsset.objects.get(pk=asset_id).state == "pending"
    services.download_submit(owner=other_user, url=URL)  # someone else wants it too
    hold()
    services.asset_release(asset_id, token, partial="if_unneeded")  # a cancel
    assert folder.exists()
    hold()
    services.asset_release(asset_id, token, failure=NetworkFailed("reset"))  # retry starts clean
    assert not folder.exists()
    assert MediaAsset.objects.get(pk=asset_id).state == "pending"
    hold()
    services.asset_release(asset_id, token, failure=Unavailable("gone"))
    asset = MediaAsset.objects.get(pk=asset_id)
    assert asset.state == "error" and asset.error_code == "unavailable"


def test_cancelling_a_paused_download_deletes_its_partial(user):
    download = services.download_submit(owner=user, url=URL)
    folder = partial(download.asset_id)
    services.download_pause(download)
    assert folder.exists()
    services.download_cancel(Download.objects.get(pk=download.pk))
    assert not folder.exists()
    assert Download.objects.get(pk=download.pk).status == "cancelled"


def test_worker_cleanup_releases_the_asset_it_held(user):
    download = services.download_submit(owner=user, url=URL)
    job = download.job
    job.lease_token = uuid.uuid4()
    assert services.asset_claim(download.asset_id, job.lease_token)
    folder = partial(download.asset_id)
    fetch.cleanup(job, outcome=Outcome.PAUSED, final=False)
    assert folder.exists() and MediaAsset.objects.get().state == "pending"
    assert services.asset_claim(download.asset_id, job.lease_token)
    fetch.cleanup(job, outcome=Outcome.STALLED, final=False)
    assert not folder.exists() and MediaAsset.objects.get().state == "pending"


def test_storage_counts_each_held_asset_once(user):
    DownloadQuota.objects.create(user=user, storage_bytes=10_000)
    first = services.download_submit(owner=user, url=URL)
    make_ready(first.asset, 3_000)
    Download.objects.filter(pk=first.pk).update(status="successful")
    Job.objects.filter(pk=first.job_id).update(status=JobStatus.SUCCESSFUL)
    second = services.download_submit(owner=user, url=URL)  # the same asset again
    assert second.status == "successful"
    assert selectors.storage_used_bytes(user) == 3_000
    assert selectors.storage_left_bytes(user) == 7_000
    # Holding it already, another copy costs nothing; a new 8,000-byte file does not fit.
    services.quota_check(user, first.asset_id, 3_000)
    other = services.download_submit(owner=user, url=URL + "?big")
    with pytest.raises(QuotaExceeded):
        services.quota_check(user, other.asset_id, 8_000)
    # A cancelled download holds nothing.
    Job.objects.filter(pk=first.job_id).update(status=JobStatus.CANCELLED)
    Download.objects.filter(pk=second.pk).update(status="cancelled")
    assert selectors.storage_used_bytes(user) == 0


def test_unlimited_users_have_no_storage_limit(user):
    DownloadQuota.objects.create(user=user, storage_bytes=0, unlimited=True)
    assert selectors.storage_left_bytes(user) is None
    services.quota_check(user, 1, 10**15)


def test_a_ready_asset_opens_its_key_to_everyone_and_a_forgotten_one_closes_it(user):
    from jobs.models import ConcurrencyLimit

    download = services.download_submit(owner=user, url=URL)
    key = f"asset:{download.asset_id}"
    token = uuid.uuid4()
    services.asset_claim(download.asset_id, token)
    assert services.asset_ready(download.asset_id, token, file="assets/x/media.mp4", size_bytes=5)
    assert ConcurrencyLimit.objects.get(key=key).limit > 1
    services.asset_forget(download.asset_id)
    assert ConcurrencyLimit.objects.get(key=key).limit == 1
