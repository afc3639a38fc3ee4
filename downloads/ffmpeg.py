"""Finding ffmpeg/ffprobe, and running them on downloaded files safely.

The safety rule: ffmpeg and ffprobe read local files only, and never pick a
demuxer by guessing from file content. A "video" that is really an HLS
playlist or a concat script would otherwise make ffmpeg open the files (or
URLs) it names. So before anything touches a downloaded file, `sniff()`
checks its first bytes against the containers we handle and refuses the
rest; every input then gets an explicit `-f`, a protocol whitelist and a
demuxer whitelist (`INPUT_SAFETY`), which also bounds what yt-dlp's own
post-processors may open.
"""

import functools
import json
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from downloads.errors import NotMedia, PostprocessFailed

# ffmpeg demuxer names for the containers sniff() recognises; nothing else may be opened.
DEMUXERS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,mpegts,mp3,aac,ogg,flac,wav,flv"
INPUT_SAFETY = ("-protocol_whitelist", "file,pipe", "-format_whitelist", DEMUXERS)
SNIFF_BYTES = 8192
PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Tools:
    ffmpeg: str
    ffprobe: str | None  # imageio-ffmpeg ships no ffprobe


@functools.cache
def locate():
    """The system's ffmpeg and ffprobe when installed, else imageio-ffmpeg's ffmpeg alone.

    The one place that finds them: every ffmpeg or ffprobe the project runs comes from here.
    Looked up once per process, from that process's PATH.
    """
    system = shutil.which("ffmpeg")
    if system:
        return Tools(ffmpeg=system, ffprobe=shutil.which("ffprobe"))
    try:
        import imageio_ffmpeg

        return Tools(ffmpeg=imageio_ffmpeg.get_ffmpeg_exe(), ffprobe=None)
    except (ImportError, RuntimeError):  # RuntimeError: a platform it ships no binary for
        raise PostprocessFailed("ffmpeg is not installed (neither on PATH nor imageio-ffmpeg).") \
            from None


# --- What a file really is ---------------------------------------------------

@dataclass(frozen=True)
class Container:
    name: str  # what the file is: mp4, matroska, mpegts, mp3, aac, ogg, flac, wav, flv
    demuxer: str  # the ffmpeg input format (-f) that reads it


ISO_BMFF_FIRST_BOXES = {b"ftyp", b"styp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot"}
TS_PACKET_BYTES = 188
M2TS_PACKET_BYTES = 192  # Blu-ray style: a 4-byte timestamp before each packet


def sniff(path):
    """The container `path` holds, from its first bytes; raises NotMedia for anything else."""
    path = Path(path)
    with path.open("rb") as file:
        head = file.read(SNIFF_BYTES)
    container = _container(head)
    if container is None:
        raise NotMedia(f"{path.name} is {_describe(head)}, not an audio or video file.")
    return container


def _container(head):
    if len(head) < 12:
        return None
    box_bytes = struct.unpack(">I", head[:4])[0]  # 0: to the end of file, 1: a 64-bit size follows
    if head[4:8] in ISO_BMFF_FIRST_BOXES and (box_bytes in (0, 1) or box_bytes >= 8):
        return Container("mp4", "mov")
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return Container("matroska", "matroska")
    if _packets_at(head, 0, TS_PACKET_BYTES) or _packets_at(head, 4, M2TS_PACKET_BYTES):
        return Container("mpegts", "mpegts")
    if head.startswith(b"OggS"):
        return Container("ogg", "ogg")
    if head.startswith(b"fLaC"):
        return Container("flac", "flac")
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return Container("wav", "wav")
    if head.startswith(b"FLV\x01"):
        return Container("flv", "flv")
    audio = head
    if head.startswith(b"ID3") and len(head) >= 10:
        # Skip the ID3v2 tag (a synchsafe size) to reach the first audio frame.
        size = sum((byte & 0x7F) << (7 * (3 - i)) for i, byte in enumerate(head[6:10]))
        audio = head[10 + size:]
        if len(audio) < 2:
            return Container("mp3", "mp3")  # a tag longer than we read: MP3 by far the likeliest
    if len(audio) >= 2 and audio[0] == 0xFF and audio[1] & 0xE0 == 0xE0:
        # MPEG audio frame sync; layer bits 00 mean an ADTS (AAC) header instead.
        return Container("aac", "aac") if audio[1] & 0x06 == 0 else Container("mp3", "mp3")
    return None


def _packets_at(head, offset, stride):
    """True when MPEG-TS sync bytes (0x47) sit at every packet start we have read (3 at least)."""
    starts = range(offset, len(head), stride)
    return len(starts) >= 3 and all(head[i] == 0x47 for i in starts)


def _describe(head):
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if not head:
        return "empty"
    if text.startswith(b"#extm3u") or text.startswith(b"#ext"):
        return "a playlist (M3U)"
    if text.startswith(b"ffconcat"):
        return "an ffmpeg concat script"
    if text.startswith(b"[playlist]"):
        return "a playlist (PLS)"
    if text.startswith((b"<!doctype html", b"<html")) or b"<html" in text[:512]:
        return "a web page"
    if text.startswith(b"<"):
        return "an XML or HTML document"
    return "not a recognised media container"


# --- Running ffmpeg and ffprobe ----------------------------------------------

def input_args(path, container=None):
    """The arguments that open `path` safely: whitelists, its real demuxer, the file: protocol."""
    container = container or sniff(path)
    return [*INPUT_SAFETY, "-f", container.demuxer, "-i", f"file:{Path(path)}"]


def ffmpeg_command(inputs, output, *, output_args=(), output_format=None, progress=False,
                   tools=None):
    """Argv for ffmpeg reading local `inputs` and writing `output`.

    Each input is a path or a (path, [options placed before its -i]) pair;
    every one is sniffed and opened with an explicit demuxer. `progress`
    writes ffmpeg's key=value progress to stdout (the caller's liveness
    signal). The output is always a local file.
    """
    tools = tools or locate()
    argv = [tools.ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]
    if progress:
        argv += ["-progress", "pipe:1", "-nostats"]
    for item in inputs:
        path, options = (item, ()) if isinstance(item, (str, Path)) else item
        argv += [*options, *input_args(path)]
    argv += list(output_args)
    if output_format:
        argv += ["-f", output_format]
    argv.append(f"file:{Path(output)}")
    return argv


def probe(path, *, tools=None):
    """Duration and streams of a local media file.

    Returns {"container", "duration_s", "bit_rate", "streams": [{"index", "type",
    "codec", "width", "height", "sample_rate", "channels", "duration_s"}]}.
    """
    tools = tools or locate()
    container = sniff(path)
    if tools.ffprobe is None:
        return _probe_with_ffmpeg(path, container, tools)
    argv = [tools.ffprobe, "-v", "error", *INPUT_SAFETY, "-f", container.demuxer,
            "-print_format", "json", "-show_format", "-show_streams", f"file:{Path(path)}"]
    result = _run(argv)
    data = json.loads(result.stdout or "{}")
    fmt = data.get("format", {})
    return {
        "container": container.name,
        "duration_s": _float(fmt.get("duration")),
        "bit_rate": _int(fmt.get("bit_rate")),
        "streams": [
            {
                "index": stream.get("index"),
                "type": stream.get("codec_type"),
                "codec": stream.get("codec_name"),
                "width": stream.get("width"),
                "height": stream.get("height"),
                "sample_rate": _int(stream.get("sample_rate")),
                "channels": stream.get("channels"),
                "duration_s": _float(stream.get("duration")),
            }
            for stream in data.get("streams", [])
        ],
    }


DURATION = re.compile(r"Duration: (\d+):(\d\d):(\d\d(?:\.\d+)?)")
STREAM = re.compile(r"Stream #\d+:(\d+)[^:]*: (Video|Audio|Subtitle|Data): (\w+)([^\n]*)")
SIZE = re.compile(r"\b(\d{2,5})x(\d{2,5})\b")
RATE = re.compile(r"\b(\d+) Hz\b")


def _probe_with_ffmpeg(path, container, tools):
    """probe() without ffprobe: read what `ffmpeg -i` prints about its input."""
    argv = [tools.ffmpeg, "-hide_banner", "-nostdin", *input_args(path, container),
            "-f", "null", "-t", "0", "-"]
    # Only the input's description: ffmpeg then lists its output's streams the same way.
    text = _run(argv).stderr.partition("\nOutput #")[0]
    duration = DURATION.search(text)
    streams = []
    for match in STREAM.finditer(text):
        rest = match.group(4)
        size, rate = SIZE.search(rest), RATE.search(rest)
        streams.append({
            "index": int(match.group(1)),
            "type": match.group(2).lower(),
            "codec": match.group(3),
            "width": int(size.group(1)) if size else None,
            "height": int(size.group(2)) if size else None,
            "sample_rate": int(rate.group(1)) if rate else None,
            "channels": None,
            "duration_s": None,
        })
    return {
        "container": container.name,
        "duration_s": (int(duration.group(1)) * 3600 + int(duration.group(2)) * 60
                       + float(duration.group(3))) if duration else None,
        "bit_rate": None,
        "streams": streams,
    }


def _run(argv):
    try:
        result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                timeout=PROBE_TIMEOUT_S, errors="replace")
    except subprocess.TimeoutExpired:
        raise PostprocessFailed(f"{Path(argv[0]).name} took longer than {PROBE_TIMEOUT_S} s.") \
            from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise PostprocessFailed(f"{Path(argv[0]).name} failed: {last}")
    return result


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
