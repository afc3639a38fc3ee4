"""The fuzz layer's world: four actors and the objects they own (the budget and the figures
are in tests/fuzz/harness.py)."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone


class World:
    """Everything the actors own, and the ids a path may name."""

    def __init__(self, media_root):
        from core.models import ApiToken
        from downloads import services as downloads
        from downloads.models import Download, MediaAsset, Shot
        from insights.models import Insight
        from jobs import services as jobs
        from jobs.models import Job, JobStatus, Queue, Worker
        from subscriptions.models import Subscription

        users = get_user_model().objects
        self.user = users.create_user("fuzz-user", password="fuzz-pass-1")
        self.nobody = users.create_user("fuzz-nobody", password="fuzz-pass-2")
        self.staff = users.create_superuser("fuzz-staff", password="fuzz-pass-3")
        _, self.staff_token = ApiToken.issue(user=self.staff)
        _, self.user_token = ApiToken.issue(user=self.user)

        download = downloads.download_submit(owner=self.user, url="https://videos.example/a.mp4")
        asset = download.asset
        folder = media_root / "assets" / str(asset.pk)
        folder.mkdir(parents=True)
        (folder / "media.mp4").write_bytes(bytes(range(256)) * 4)
        MediaAsset.objects.filter(pk=asset.pk).update(
            state="ready", file=f"assets/{asset.pk}/media.mp4", size_bytes=1024, title="A",
            duration_s=10.0)
        Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL, progress=1.0)
        Download.objects.filter(pk=download.pk).update(status="successful",
                                                       finished_at=timezone.now())
        shot = Shot.objects.create(asset=asset, index=0, start_s=0, end_s=5)
        queued = downloads.download_submit(owner=self.user, url="https://videos.example/b.mp4")
        theirs = downloads.download_submit(owner=self.nobody, url="https://videos.example/c.mp4")
        Download.objects.filter(pk=theirs.pk).delete()  # the nobody owns nothing
        failed = jobs.enqueue("tests.noop", {})
        Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)
        insight = Insight.objects.create(owner=self.user, kind="video_summary", subject=str(asset.pk))
        subscription = Subscription.objects.create(
            owner=self.user, url="https://videos.example/list", url_digest="0" * 64,
            format="best", interval_s=3600)
        Queue.objects.get_or_create(name="insights")
        worker = Worker.objects.create(name="fuzz-worker", host="h", pid=1)
        self.ids = [str(v) for v in [
            download.pk, queued.pk, theirs.pk, shot.pk, asset.pk, insight.pk, subscription.pk,
            failed.pk, queued.job_id, worker.pk, self.user.pk, self.staff.pk, "default",
            "insights", "pause", "resume", "cancel", "retry", "segment", "analyze", "limits",
            "quiet", "stop", "check", "thumbnail", "strip", "0", "jobs", "auth", "downloads",
            "insights", "subscriptions", "core", "django_q", "job", "user", "queue", "video_summary",
        ]]


@pytest.fixture
def world(db, media_root):
    return World(media_root)


@pytest.fixture
def actors(world):
    """name -> a fresh logged-in (or anonymous) client; called once per example."""
    people = {"anonymous": None, "user": world.user, "nobody": world.nobody, "staff": world.staff}

    def client(name):
        c = Client()
        if people[name] is not None:
            c.force_login(people[name])
        return c

    return client
