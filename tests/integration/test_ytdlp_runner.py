"""The download runner against real yt-dlp, a real HTTP origin on loopback and real ffmpeg."""

import json
import shlex
import threading
import time
from pathlib import Path

import pytest

from downloads import egress, ffmpeg, ytdlp
from downloads.egress import EgressPolicy
from downloads.errors import (
    BlockedDestination,
    Cancelled,
    NetworkFailed,
    NotMedia,
    StorageFull,
    TooLarge,
    Unavailable,
    UnsupportedURL,
)
from tests import media

# Nothing here depends on the database: the SQLite pass skips it.
pytestmark = pytest.mark.dbless

MB = 1024 * 1024


@pytest.fixture
def policy(origin):
    return EgressPolicy.from_setting(f"127.0.0.1:{origin.port}")


@pytest.fixture
def staging(tmp_path):
    return tmp_path / "staging"


@pytest.fixture
def ffmpeg_log(tmp_path):
    """A folder of ffmpeg/ffprobe wrappers that log every call, and the log."""
    folder, log = tmp_path / "bin", tmp_path / "ffmpeg.log"
    folder.mkdir()
    log.touch()
    tools = ffmpeg.locate()
    for name, real in (("ffmpeg", tools.ffmpeg), ("ffprobe", tools.ffprobe)):
        if real:
            script = folder / name
            script.write_text(f'#!/bin/sh\necho "{name} $*" >> {shlex.quote(str(log))}\n'
                              f'exec {shlex.quote(real)} "$@"\n')
            script.chmod(0o755)
    return folder, log


def download(url, staging, policy, **kwargs):
    kwargs.setdefault("fmt", "best")
    kwargs.setdefault("retries", 0)
    kwargs.setdefault("progress_interval_s", 0)
    return ytdlp.run_download(url, staging_dir=staging, policy=policy, **kwargs)


def leftovers(staging):
    return sorted(p.name for p in Path(staging).iterdir()) if Path(staging).exists() else []


# --- Plain downloads ----------------------------------------------------------

def test_direct_mp4_arrives_byte_for_byte(origin, policy, staging):
    source = media.short_mp4()
    url = origin.add_file("/films/clip.mp4", source)
    reports = []
    result = download(url, staging, policy, on_progress=reports.append)
    assert result.path == staging / "media.mp4"
    assert result.path.read_bytes() == source.read_bytes()
    assert result.size_bytes == source.stat().st_size
    assert result.title == "clip"
    assert result.duration_s == pytest.approx(2.0, abs=0.1)
    assert result.files == (result.path,)
    json.dumps(result.info)
    assert result.info["ext"] == "mp4"
    assert reports[-1]["fraction"] == 1.0
    assert reports[-1]["downloaded_bytes"] == source.stat().st_size
    assert {r["phase"] for r in reports} == {"downloading"}
    fractions = [r["fraction"] for r in reports if r["fraction"] is not None]
    assert fractions == sorted(fractions)
    assert leftovers(staging) == ["media.mp4"]


def test_hls_rendition_is_fetched_segment_by_segment_and_remuxed(origin, policy, staging,
                                                                 ffmpeg_log):
    folder = media.hls_rendition()
    url = origin.add_folder("/hls", folder) + "index.m3u8"
    segments = sorted(p.name for p in folder.glob("*.ts"))
    assert len(segments) >= 2
    reports = []
    bin_folder, log = ffmpeg_log
    result = download(url, staging, policy, on_progress=reports.append,
                      ffmpeg_location=str(bin_folder))
    remux = [line for line in log.read_text().splitlines()
             if line.startswith("ffmpeg ") and str(staging) in line]
    assert remux and all("-protocol_whitelist file,pipe -format_whitelist" in line
                         for line in remux)
    assert ffmpeg.sniff(result.path).name == "mp4"  # MPEG-TS segments remuxed into MP4
    assert result.duration_s == pytest.approx(3.0, abs=0.2)
    for name in segments:
        assert origin.requests_for(f"/hls/{name}"), name
    assert reports[-1]["phase"] == "postprocessing"
    assert reports[-1]["postprocessor"] == "FixupM3u8"
    assert leftovers(staging) == ["media.mp4"]


def test_audio_is_extracted_to_m4a_with_ffmpeg_held_to_local_files(origin, policy, staging,
                                                                     ffmpeg_log):
    url = origin.add_file("/clip.mp4", media.short_mp4())
    folder, log = ffmpeg_log
    result = download(url, staging, policy, fmt="audio", ffmpeg_location=str(folder))
    assert result.path == staging / "media.m4a"
    probed = ffmpeg.probe(result.path)
    assert [s["type"] for s in probed["streams"]] == ["audio"]
    assert probed["streams"][0]["codec"] == "aac"
    assert leftovers(staging) == ["media.m4a"]
    calls = [line for line in log.read_text().splitlines() if str(staging) in line]
    ffmpeg_calls = [line for line in calls if line.startswith("ffmpeg ")]
    assert ffmpeg_calls
    for line in ffmpeg_calls:
        assert "-protocol_whitelist file,pipe -format_whitelist" in line


def test_playlist_needs_asking_and_is_capped(origin, policy, staging):
    items = []
    for i in range(4):
        clip = origin.add_file(f"/c{i}.mp4", media.short_mp4())
        items.append(f"<item><title>Clip {i}</title><link>{clip}</link>"
                     f'<enclosure url="{clip}" type="video/mp4" length="1"/></item>')
    feed = origin.add_file("/feed.xml", (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>Feed</title>'
        f"<link>{origin.url('/')}</link>{''.join(items)}</channel></rss>").encode())
    with pytest.raises(UnsupportedURL, match="playlist"):
        download(feed, staging, policy)
    assert not origin.requests_for("/c0.mp4")
    result = download(feed, staging, policy, allow_playlist=True, playlist_limit=2)
    assert [p.name for p in result.files] == ["media-001.mp4", "media-002.mp4"]
    assert not origin.requests_for("/c2.mp4")
    entries = ytdlp.list_entries(feed, 3, policy=policy)
    assert [e["title"] for e in entries] == ["Clip 0", "Clip 1", "Clip 2"]
    assert [e["url"] for e in entries] == [origin.url(f"/c{i}.mp4") for i in range(3)]


# --- Stopping, resuming, stalling ---------------------------------------------

def stop_after(reports, byte_count):
    return lambda: bool(reports) and reports[-1]["downloaded_bytes"] >= byte_count


def test_cancel_mid_download_keeps_the_partial_until_discarded(origin, policy, staging):
    url = origin.add_file("/big.mp4", media.padded_mp4(4 * MB), throttle_bytes_s=2 * MB)
    reports = []
    with pytest.raises(Cancelled) as caught:
        download(url, staging, policy, on_progress=reports.append,
                 should_stop=stop_after(reports, 256 * 1024))
    assert caught.value.code == "cancelled"
    assert 256 * 1024 <= reports[-1]["downloaded_bytes"] < 4 * MB
    assert leftovers(staging) == ["media.mp4.part"]
    ytdlp.discard_staging(staging)
    assert not staging.exists()


def test_pause_then_resume_continues_from_the_partial(origin, policy, staging):
    source = media.padded_mp4(2 * MB, seed=1)
    url = origin.add_file("/big.mp4", source, throttle_bytes_s=2 * MB)
    reports = []
    with pytest.raises(Cancelled):
        download(url, staging, policy, on_progress=reports.append,
                 should_stop=stop_after(reports, 300 * 1024))
    partial_bytes = (staging / "media.mp4.part").stat().st_size
    assert 300 * 1024 <= partial_bytes < 2 * MB
    origin.resources["/big.mp4"].throttle_bytes_s = None
    before = len(origin.requests_for("/big.mp4"))
    result = download(url, staging, policy)
    resumed = [seen.range_start for seen in origin.requests_for("/big.mp4")[before:]
               if seen.method == "GET" and seen.range_start]
    assert resumed == [partial_bytes]
    assert result.path.read_bytes() == source.read_bytes()
    assert leftovers(staging) == ["media.mp4"]


def test_a_drip_fed_origin_reports_no_progress_it_did_not_make(origin, policy, staging):
    drip_bytes = 64 * 1024
    url = origin.add_file("/drip.mp4", media.padded_mp4(1 * MB, seed=2), drip_bytes=drip_bytes)
    reports, outcome = [], {}

    def run():
        try:
            download(url, staging, policy, on_progress=reports.append, socket_timeout_s=30)
        except Exception as exc:  # noqa: BLE001 - handed to the test thread below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert origin.stalled.wait(10)
        # Wait for a quiet second: once the dripped bytes are in, reports stop.
        seen, quiet_since, deadline = len(reports), time.monotonic(), time.monotonic() + 10
        while time.monotonic() - quiet_since < 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
            if len(reports) != seen:
                seen, quiet_since = len(reports), time.monotonic()
        assert time.monotonic() - quiet_since >= 1.0, "progress kept coming from a stalled origin"
        assert thread.is_alive()
        # Nothing beyond what the origin sent was ever reported.
        assert drip_bytes // 2 <= max(r["downloaded_bytes"] for r in reports) <= drip_bytes
        assert reports[-1]["fraction"] < 0.1
    finally:
        origin.release()
        thread.join(30)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), NetworkFailed)
    assert not staging.exists()


# --- Size limits --------------------------------------------------------------

def test_too_large_with_content_length_is_refused_before_any_byte(origin, policy, staging):
    size = 1 * MB
    url = origin.add_file("/big.mp4", media.padded_mp4(size, seed=3))
    reports = []
    with pytest.raises(TooLarge) as caught:
        download(url, staging, policy, on_progress=reports.append, max_bytes=300 * 1024)
    assert caught.value.code == "too_large"
    assert caught.value.size_bytes == size
    assert caught.value.limit_bytes == 300 * 1024
    assert reports == []
    assert not staging.exists()


def test_too_large_without_content_length_stops_once_past_the_limit(origin, policy, staging):
    url = origin.add_file("/big.mp4", media.padded_mp4(2 * MB, seed=4), content_length=False)
    reports = []
    with pytest.raises(TooLarge) as caught:
        download(url, staging, policy, on_progress=reports.append, max_bytes=300 * 1024)
    assert caught.value.size_bytes is None
    assert 150 * 1024 < reports[-1]["downloaded_bytes"] <= 300 * 1024
    assert not staging.exists()


def test_within_the_limit_downloads(origin, policy, staging):
    source = media.short_mp4()
    url = origin.add_file("/clip.mp4", source, content_length=False)
    result = download(url, staging, policy, max_bytes=source.stat().st_size)
    assert result.path.read_bytes() == source.read_bytes()


# --- Egress ---------------------------------------------------------------------

def test_redirect_to_a_disallowed_server_is_blocked_before_it_connects(
        origin, elsewhere, policy, staging):
    url = origin.add_redirect("/go", elsewhere.url("/clip.mp4"))
    with pytest.raises(BlockedDestination) as caught:
        download(url, staging, policy)
    assert caught.value.code == "blocked_destination"
    assert caught.value.destination == f"127.0.0.1:{elsewhere.port}"
    assert elsewhere.saw_nothing()
    assert not staging.exists()
    assert egress.installed() == []  # the guard left with the download


@pytest.mark.parametrize("target", ["gopher://127.0.0.1:70/_x", "dict://127.0.0.1:11211/stat",
                                    "rtsp://127.0.0.1:554/x", "file:///etc/passwd"])
def test_a_redirect_to_another_scheme_is_refused_for_good_not_retried(origin, policy, staging,
                                                                      target):
    url = origin.add_redirect("/go", target)
    with pytest.raises(UnsupportedURL) as caught:
        download(url, staging, policy)
    assert caught.value.code == "unsupported_url"
    assert not staging.exists()


def test_progress_callbacks_reach_their_own_services_while_guarded(
        origin, elsewhere, policy, staging):
    """on_progress and should_stop are the caller's code: their connections are not egress."""
    import urllib.request

    url = origin.add_file("/clip.mp4", media.short_mp4())
    statuses = []

    def write_progress(progress):
        if not statuses:
            with urllib.request.urlopen(elsewhere.url("/clip.mp4"), timeout=5) as reply:
                statuses.append(reply.status)

    download(url, staging, policy, on_progress=write_progress)
    assert statuses == [200]


def test_hls_segment_on_a_disallowed_server_is_blocked(origin, elsewhere, policy, staging):
    playlist = (media.hls_rendition() / "index.m3u8").read_text()
    playlist = "\n".join(elsewhere.url(f"/hls/{line}") if line.endswith(".ts") else line
                         for line in playlist.splitlines())
    url = origin.add_file("/mixed.m3u8", playlist.encode())
    with pytest.raises(BlockedDestination) as caught:
        download(url, staging, policy)
    assert caught.value.destination == f"127.0.0.1:{elsewhere.port}"
    assert origin.requests_for("/mixed.m3u8")
    assert elsewhere.saw_nothing()
    assert not staging.exists()


def test_a_name_that_resolves_to_loopback_is_blocked_at_connect_time(
        elsewhere, staging, monkeypatch):
    import socket

    real_getaddrinfo = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):
        return real_getaddrinfo("127.0.0.1" if host == "videos.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(BlockedDestination):
        download(f"http://videos.example:{elsewhere.port}/clip.mp4", staging, EgressPolicy())
    assert elsewhere.saw_nothing()


def test_a_loopback_url_is_refused_before_any_connection(elsewhere, policy, staging):
    with pytest.raises(UnsupportedURL) as caught:
        download(elsewhere.url("/clip.mp4"), staging, policy)
    assert caught.value.code == "unsupported_url"
    assert elsewhere.saw_nothing()


# --- Files that are not media ---------------------------------------------------

def disguised_playlist(origin, tmp_path):
    """A "video" that is really an HLS playlist naming a local file."""
    secret = tmp_path / "secret.ts"
    secret.write_bytes(b"G" * 188 * 4)
    text = f"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:{secret}\n#EXT-X-ENDLIST\n"
    return origin.add_file("/trap.mp4", text.encode(), content_type="video/mp4")


@pytest.mark.parametrize("fmt", ["best", "audio"])
def test_a_playlist_posing_as_a_video_never_reaches_ffmpeg(origin, policy, staging, tmp_path,
                                                           ffmpeg_log, fmt):
    url = disguised_playlist(origin, tmp_path)
    folder, log = ffmpeg_log
    reports = []
    with pytest.raises(NotMedia) as caught:
        download(url, staging, policy, fmt=fmt, ffmpeg_location=str(folder),
                 on_progress=reports.append)
    assert caught.value.code == "postprocess"
    assert "playlist" in str(caught.value)
    assert str(staging) not in log.read_text()
    assert "postprocessing" not in {r["phase"] for r in reports}
    assert not staging.exists()


def test_a_complete_file_found_in_staging_is_checked_too(origin, policy, staging, tmp_path,
                                                         ffmpeg_log):
    url = disguised_playlist(origin, tmp_path)
    staging.mkdir()
    (staging / "media.m4a").write_bytes(b"#EXTM3U\n#EXTINF:1,\nfile:/etc/hostname\n")
    folder, log = ffmpeg_log
    with pytest.raises(NotMedia):
        download(url, staging, policy, fmt="audio", ffmpeg_location=str(folder))
    assert str(staging) not in log.read_text()


# --- Failures and their codes ---------------------------------------------------

def test_failures_map_to_codes(origin, policy, staging):
    url = origin.url("/missing.mp4")
    with pytest.raises(Unavailable) as caught:
        download(url, staging, policy)
    assert caught.value.code == "unavailable"
    with pytest.raises(UnsupportedURL):
        download("file:///etc/passwd", staging, policy)
    closed = EgressPolicy.from_setting("127.0.0.1:9")
    with pytest.raises(NetworkFailed) as caught:
        download("http://127.0.0.1:9/clip.mp4", staging, closed)
    assert caught.value.code == "network"
    assert not staging.exists()


def test_a_full_disk_is_storage_full(origin, policy, staging):
    url = origin.add_file("/clip.mp4", media.short_mp4())
    staging.mkdir()
    (staging / "media.mp4.part").symlink_to("/dev/full")  # every write fails with ENOSPC
    with pytest.raises(StorageFull) as caught:
        download(url, staging, policy)
    assert caught.value.code == "storage_full"
    assert not staging.exists()


def test_options_are_fixed_and_keep_everything_inside(staging):
    options = ytdlp.build_options(fmt="720p", staging_dir=staging)
    assert options["outtmpl"] == {"default": "media.%(ext)s"}
    assert options["paths"] == {"home": str(staging), "temp": str(staging)}
    assert options["external_downloader"] == {"default": "native"}
    assert options["noplaylist"] is True
    assert options["postprocessors"] == []
    assert options["proxy"] == ""
    assert not options["enable_file_urls"]
    assert "height<=?720" in options["format"]
    assert options["format"].count("[protocol~=") == 3
    args = options["postprocessor_args"]
    for name in ("merger", "extractaudio", "fixupm3u8"):
        assert args[f"{name}+ffmpeg_i"] == list(ffmpeg.INPUT_SAFETY)
    with pytest.raises(ValueError, match="Unknown download format"):
        ytdlp.build_options(fmt="4k", staging_dir=staging)


# --- ffmpeg helpers -------------------------------------------------------------

@pytest.mark.parametrize(
    ("head", "name"),
    [
        (b"\x00\x00\x00\x20ftypisom" + bytes(24), "mp4"),
        (b"\x1a\x45\xdf\xa3" + bytes(40), "matroska"),
        ((b"\x47" + bytes(187)) * 4, "mpegts"),
        (b"OggS" + bytes(40), "ogg"),
        (b"fLaC" + bytes(40), "flac"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt " + bytes(20), "wav"),
        (b"ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x00" + bytes(20), "mp3"),
        (b"\xff\xf1\x50\x80" + bytes(40), "aac"),
    ],
)
def test_sniff_recognises_containers(tmp_path, head, name):
    path = tmp_path / "file"
    path.write_bytes(head)
    assert ffmpeg.sniff(path).name == name


@pytest.mark.parametrize(
    ("content", "described"),
    [
        (b"#EXTM3U\n#EXTINF:1,\nfile:/etc/passwd\n", "playlist"),
        (b"\xef\xbb\xbf#EXTM3U\nx.ts\n", "playlist"),
        (b"ffconcat version 1.0\nfile /etc/passwd\n", "concat script"),
        (b"<!DOCTYPE html><html><body>Sign in</body></html>", "web page"),
        (b"[playlist]\nFile1=/etc/passwd\n", "playlist"),
        (b"\x00" * 64, "not a recognised"),
        (b"", "empty"),
    ],
)
def test_sniff_refuses_what_is_not_media(tmp_path, content, described):
    path = tmp_path / "media.mp4"
    path.write_bytes(content)
    with pytest.raises(NotMedia, match=described):
        ffmpeg.sniff(path)


def test_real_files_sniff_and_probe(tmp_path):
    video = media.short_mp4()
    assert ffmpeg.sniff(video) == ffmpeg.Container("mp4", "mov")
    segment = sorted(media.hls_rendition().glob("*.ts"))[0]
    assert ffmpeg.sniff(segment).name == "mpegts"
    probed = ffmpeg.probe(video)
    assert probed["duration_s"] == pytest.approx(2.0, abs=0.1)
    assert {s["type"] for s in probed["streams"]} == {"video", "audio"}
    video_stream = next(s for s in probed["streams"] if s["type"] == "video")
    assert (video_stream["width"], video_stream["height"]) == (160, 120)
    without_ffprobe = ffmpeg.Tools(ffmpeg=ffmpeg.locate().ffmpeg, ffprobe=None)
    rough = ffmpeg.probe(video, tools=without_ffprobe)
    assert rough["duration_s"] == pytest.approx(2.0, abs=0.1)
    assert {s["type"] for s in rough["streams"]} == {"video", "audio"}


def test_ffmpeg_command_forces_the_demuxer_and_local_files(tmp_path):
    import subprocess

    output = tmp_path / "cut.m4a"
    argv = ffmpeg.ffmpeg_command([(media.short_mp4(), ["-ss", "0.5"])], output,
                                 output_args=["-vn", "-c:a", "copy"], output_format="ipod")
    head = argv[:argv.index("-i") + 2]
    assert head[-1] == f"file:{media.short_mp4()}"
    assert head[head.index("-f") + 1] == "mov"
    assert "-protocol_whitelist" in head and "-format_whitelist" in head
    assert argv[-1] == f"file:{output}"
    subprocess.run(argv, check=True, capture_output=True)
    assert ffmpeg.probe(output)["duration_s"] == pytest.approx(1.5, abs=0.1)
    trap = tmp_path / "trap.mp4"
    trap.write_bytes(b"#EXTM3U\nfile:/etc/passwd\n")
    with pytest.raises(NotMedia):
        ffmpeg.ffmpeg_command([trap], tmp_path / "out.mp4")
