"""Small test videos made with ffmpeg, generated once per test session.

Every function returns a path inside one temporary folder that lives as long
as the test process; asking twice returns the same file without encoding it
again.
"""

import atexit
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from downloads.ffmpeg import locate

_folder = None
_lock = threading.Lock()


def cache_dir():
    global _folder
    with _lock:
        if _folder is None:
            _folder = Path(tempfile.mkdtemp(prefix="haulage-media-"))
            atexit.register(shutil.rmtree, _folder, ignore_errors=True)
        return _folder


def _make(name, build):
    """Build `name` in the cache folder once; `build(path)` writes it."""
    path = cache_dir() / name
    if not path.exists():
        partial = path.with_name(path.name + ".tmp")
        build(partial)
        partial.rename(path)
    return path


def _ffmpeg(*args):
    subprocess.run(
        [locate().ffmpeg, "-hide_banner", "-loglevel", "error", "-y", *args],
        check=True, stdin=subprocess.DEVNULL,
    )


def short_mp4(duration_s=2, size="160x120"):
    """A test pattern with a sine tone (H.264 + AAC in MP4)."""

    def build(path):
        _ffmpeg(
            "-f", "lavfi", "-i", f"testsrc=s={size}:d={duration_s}",
            "-f", "lavfi", "-i", f"sine=frequency=440:duration={duration_s}",
            # A keyframe every second (25 fps) so an HLS rendition gets 1-second segments.
            "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-pix_fmt", "yuv420p",
            "-c:a", "aac", "-shortest", "-f", "mp4", str(path),
        )

    return _make(f"short-{duration_s}s-{size}.mp4", build)


def shots_mp4():
    """Four 5-second shots with hard cuts at 5, 10 and 15 s, and a tone throughout."""

    def build(path):
        _ffmpeg(
            "-f", "lavfi", "-i", "color=red:s=320x240:d=5",
            "-f", "lavfi", "-i", "testsrc=s=320x240:d=5",
            "-f", "lavfi", "-i", "color=blue:s=320x240:d=5",
            "-f", "lavfi", "-i", "smptebars=s=320x240:d=5",
            "-f", "lavfi", "-i", "sine=frequency=440:duration=20",
            "-filter_complex", "[0:v][1:v][2:v][3:v]concat=n=4:v=1:a=0[v]",
            "-map", "[v]", "-map", "4:a",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
            "-c:a", "aac", "-shortest", "-f", "mp4", str(path),
        )

    return _make("shots.mp4", build)


def padded_mp4(total_bytes, seed=0):
    """A playable MP4 grown to `total_bytes` with a trailing 'free' box of random bytes.

    Random padding makes any misplaced byte of a resumed transfer show up in a
    comparison, and large files cost no encoding time.
    """

    def build(path):
        head = short_mp4().read_bytes()
        padding = total_bytes - len(head) - 8
        if padding < 0:
            raise ValueError(f"{total_bytes} bytes is smaller than the video itself ({len(head)}).")
        noise = random.Random(seed).randbytes(padding)
        path.write_bytes(head + struct.pack(">I", padding + 8) + b"free" + noise)

    return _make(f"padded-{total_bytes}-{seed}.mp4", build)


def hls_rendition(segment_s=1):
    """A VOD HLS rendition of short_mp4(): index.m3u8 and MPEG-TS segments in one folder."""
    folder = cache_dir() / f"hls-{segment_s}s"
    if not (folder / "index.m3u8").exists():
        partial = cache_dir() / f"hls-{segment_s}s.tmp"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        _ffmpeg(
            "-i", str(short_mp4(duration_s=3)), "-c", "copy",
            "-f", "hls", "-hls_time", str(segment_s), "-hls_playlist_type", "vod",
            "-hls_segment_filename", str(partial / "seg%03d.ts"), str(partial / "index.m3u8"),
        )
        partial.rename(folder)
    return folder


HIDDEN = {"ffmpeg", "ffprobe"}


def path_without_ffmpeg(folder):
    """A PATH of one folder linking every program of the venv's bin and of PATH but ffmpeg and
    ffprobe (the first of a name wins, as a PATH lookup would)."""
    folder.mkdir()
    path = os.environ.get("PATH", os.defpath).split(os.pathsep)
    for directory in [Path(sys.executable).parent, *filter(None, path)]:
        try:
            entries = list(Path(directory).iterdir())
        except OSError:
            continue  # a PATH entry that is missing or not a folder
        for program in entries:
            link = folder / program.name
            if (program.name not in HIDDEN and not os.path.lexists(link) and program.is_file()
                    and os.access(program, os.X_OK)):
                link.symlink_to(program)
    return str(folder)
