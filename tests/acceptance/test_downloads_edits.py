"""Edits of a finished video with ffmpeg in supervised children, shared by identical requests."""

import shutil

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from downloads import edits, ffmpeg, services, storage
from downloads.edits import Edit
from downloads.models import Download, MediaAsset
from jobs.models import Job, JobStatus
from tests import media
from tests.acceptance.conftest import wait_for

pytestmark = pytest.mark.slow


def holder(name, url):
    """A user with a finished download of the four-shot sample at `url`."""
    owner = get_user_model().objects.create_user(name)
    download = services.download_submit(owner=owner, url=url)
    asset = download.asset
    if asset.state != MediaAsset.State.READY:
        storage.asset_dir(asset.pk).mkdir(parents=True)
        shutil.copy(media.shots_mp4(), storage.asset_dir(asset.pk) / "media.mp4")
        MediaAsset.objects.filter(pk=asset.pk).update(
            state="ready", file=f"assets/{asset.pk}/media.mp4", size_bytes=1, duration_s=20.0,
            segment_job=None)
        Job.objects.filter(pk=download.job_id).update(status=JobStatus.SUCCESSFUL)
        Download.objects.filter(pk=download.pk).update(status="successful")
    return owner, Download.objects.select_related("asset").get(pk=download.pk)


def finished(downloads):
    return all(not d.is_live for d in Download.objects.filter(
        pk__in=[d.pk for d in downloads]).select_related("job"))


def test_trims_copy_or_reencode_and_audio_is_extracted(spawn_worker, media_root, settings):
    settings.DOWNLOADS_SEGMENT_AUTOMATICALLY = False
    url = "https://videos.example.com/shots.mp4"
    alice, source = holder("alice", url)
    bob, bobs_source = holder("bob", url)
    parent_path = storage.absolute(source.asset.file)
    on_cut = services.edit_submit(owner=alice, source=source, edit=Edit.trim(5, 10))
    between = services.edit_submit(owner=alice, source=source, edit=Edit.trim(2.5, 4))
    audio = services.edit_submit(owner=alice, source=source, edit=Edit("audio"))
    same_cut = services.edit_submit(owner=bob, source=bobs_source, edit=Edit.trim(5, 10))
    assert same_cut.asset_id == on_cut.asset_id  # one derived asset for one cut of one file
    spawn_worker("--queues", "downloads", env={"MEDIA_ROOT": str(media_root),
                                               "DOWNLOADS_SEGMENT_AUTOMATICALLY": "0"})
    edited = [on_cut, between, audio, same_cut]
    wait_for(lambda: finished(edited), timeout=90, interval=0.25)
    rows = {d.pk: Download.objects.select_related("job", "asset").get(pk=d.pk) for d in edited}
    for row in rows.values():
        assert row.current_status == "successful", row.job.error

    cut = rows[on_cut.pk].asset
    assert cut.metadata["copied"] is edits.starts_on_keyframe(parent_path, 5.0)
    assert ffmpeg.probe(storage.absolute(cut.file))["duration_s"] == pytest.approx(5.0, abs=0.1)
    assert sum(1 for r in rows.values() if r.job.result.get("from_cache")) == 1  # bob's

    exact = rows[between.pk].asset
    assert not edits.starts_on_keyframe(parent_path, 2.5)
    assert exact.metadata["copied"] is False  # between keyframes: re-encoded to start exactly
    assert ffmpeg.probe(storage.absolute(exact.file))["duration_s"] == pytest.approx(1.5, abs=0.1)

    sound = rows[audio.pk].asset
    probed = ffmpeg.probe(storage.absolute(sound.file))
    assert [s["type"] for s in probed["streams"]] == ["audio"]
    assert sound.file.endswith(".m4a") and sound.metadata["copied"] is True
    assert probed["duration_s"] == pytest.approx(20.0, abs=0.2)
    assert not any(storage.staging_dir(r.asset_id).exists() for r in rows.values())


def test_a_cut_outside_the_video_is_refused(db, media_root):
    alice, source = holder("alice", "https://videos.example.com/shots.mp4")
    with pytest.raises(ValidationError):
        services.edit_submit(owner=alice, source=source, edit=Edit.trim(25, 30))
    assert not MediaAsset.objects.filter(parent__isnull=False).exists()
