"""The file locks that keep housekeeping from deleting a file a player is streaming, and the
MEDIA_MAX_BYTES setting; no database."""

import os
import threading
import time
from pathlib import Path

import pytest
from django.http import Http404

from downloads import conf, serving
from project.env import SettingsError


@pytest.fixture
def media(tmp_path):
    path = tmp_path / "media.mp4"
    path.write_bytes(b"x" * 100)
    return path


def test_readers_share_a_file_and_keep_the_deleter_out_until_the_last_one_closes(media):
    first, second = serving.open_shared(media), serving.open_shared(media)
    with serving.unless_read(media) as free:
        assert not free
    first.close()
    with serving.unless_read(media) as free:
        assert not free
    second.close()
    with serving.unless_read(media) as free:
        assert free


def test_a_file_already_gone_needs_no_lock_and_cannot_be_opened(tmp_path):
    with serving.unless_read(tmp_path / "gone.mp4") as free:
        assert free
    with pytest.raises(Http404):
        serving.open_shared(tmp_path / "gone.mp4")


def test_a_player_that_opens_the_file_just_before_the_unlink_gets_a_404(media):
    outcome = []

    def player():
        try:
            outcome.append(serving.open_shared(media))
        except Http404:
            outcome.append("404")

    with serving.unless_read(media) as free:
        assert free
        thread = threading.Thread(target=player, daemon=True)
        thread.start()
        _wait_until_open_twice(media)  # the player has opened it and waits for its lock
        media.unlink()
    thread.join(10)
    assert outcome == ["404"]


def _wait_until_open_twice(path, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        opened = 0
        for fd in Path("/proc/self/fd").iterdir():
            try:
                opened += os.readlink(fd) == str(path)
            except OSError:
                continue
        if opened >= 2:  # the deleter's and the player's
            return
        time.sleep(0.01)
    raise AssertionError("the player never opened the file")


@pytest.mark.parametrize(("raw", "expected"), [
    ("0", 0), ("123456", 123456), ("10G", 10 * 1024**3), ("10g", 10 * 1024**3),
    ("1.5T", int(1.5 * 1024**4)), ("500 MiB", 500 * 1024**2), ("2KB", 2048), (4096, 4096)])
def test_media_max_bytes_reads_bytes_with_or_without_a_suffix(raw, expected):
    assert conf.parse_bytes("MEDIA_MAX_BYTES", raw) == expected


@pytest.mark.parametrize("raw", ["lots", "-5", "10X", "G", "1e9", "10 G B"])
def test_a_malformed_media_max_bytes_names_the_variable_and_the_form(raw):
    with pytest.raises(SettingsError, match=r"MEDIA_MAX_BYTES must be a number of bytes.*10G"):
        conf.parse_bytes("MEDIA_MAX_BYTES", raw)


def test_media_max_bytes_unset_or_empty_means_no_cap(monkeypatch, settings):
    del settings.MEDIA_MAX_BYTES
    monkeypatch.delenv("MEDIA_MAX_BYTES", raising=False)
    assert conf.media_max_bytes() == 0
    monkeypatch.setenv("MEDIA_MAX_BYTES", "")
    assert conf.media_max_bytes() == 0
    monkeypatch.setenv("MEDIA_MAX_BYTES", "2M")
    assert conf.media_max_bytes() == 2 * 1024**2
