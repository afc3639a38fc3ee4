"""Edits of a ready asset: trim a time range, or extract the audio, with ffmpeg.

An edit makes a derived asset, shared by everyone who asks for the same cut
of the same parent (`MediaAsset.edit` holds the spec, e.g. "trim:5.000-10.000"
or "audio"). It runs like a fetch: a `process`-mode job, one attempt holding
the derived asset at a time, output in staging/<id>/ then renamed into place.
ffmpeg reports its progress on a pipe (`-progress`); every line is a sign of
life, so a wedged ffmpeg stops reporting and is killed as stalled.

Copy or re-encode: streams are copied when the cut allows it (the audio
alone, or a trim starting on a keyframe), since copying is exact there and
many times faster; a trim starting between keyframes is re-encoded so it
starts on the requested frame.
"""

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.utils.translation import gettext as _

from downloads import ffmpeg, progress, services, shots, storage
from downloads.errors import DownloadFailed, PostprocessFailed, QuotaExceeded
from downloads.models import MediaAsset
from jobs.exceptions import Fail, Retry

KEYFRAME_TOLERANCE_S = 0.002  # timestamps are rounded to the millisecond in a spec
KEYFRAME_PROBE_TIMEOUT_S = 120
EDIT_SPEC = re.compile(r"^(audio|trim:(\d+\.\d{3})-(\d+\.\d{3}))$")
MIN_TRIM_S = 0.1

# Output container per source container (what ffmpeg's -f calls it), copied streams kept.
MUXERS = {"mp4": ("mp4", ".mp4"), "matroska": ("matroska", ".mkv"), "mpegts": ("mp4", ".mp4"),
          "mp3": ("mp3", ".mp3"), "aac": ("ipod", ".m4a"), "ogg": ("ogg", ".ogg"),
          "flac": ("flac", ".flac"), "wav": ("wav", ".wav"), "flv": ("mp4", ".mp4")}


@dataclass(frozen=True)
class Edit:
    op: str  # "trim" or "audio"
    start_s: float | None = None
    end_s: float | None = None

    @property
    def spec(self):
        if self.op == "audio":
            return "audio"
        return f"trim:{self.start_s:.3f}-{self.end_s:.3f}"

    @classmethod
    def parse(cls, spec):
        match = EDIT_SPEC.match(spec or "")
        if not match:
            raise ValueError(f"Not an edit spec: {spec!r}")
        if match.group(1) == "audio":
            return cls("audio")
        return cls("trim", float(match.group(2)), float(match.group(3)))

    @classmethod
    def trim(cls, start_s, end_s):
        return cls("trim", round(float(start_s), 3), round(float(end_s), 3))


# --- The child's side ---------------------------------------------------------

def run(ctx, payload):
    from downloads import fetch
    from downloads.models import Download

    download = Download.objects.select_related("asset__parent", "owner").filter(
        pk=payload["download"]).first()
    if download is None:
        return {"skipped": "deleted"}
    asset = download.asset
    if asset.state == MediaAsset.State.READY and storage.exists(asset.file):
        return fetch.from_cache(ctx, download, asset)
    parent = asset.parent
    if parent is None or parent.state != MediaAsset.State.READY or not storage.exists(parent.file):
        raise Fail(_("The file to edit is no longer available."), code="unavailable")
    token = ctx.job.lease_token
    if not services.asset_claim(asset.pk, token):
        raise Retry(_("Another worker is making the same edit."), delay_s=10, code="asset_busy")
    try:
        return make(ctx, download, asset, parent, token)
    except DownloadFailed as exc:
        services.asset_release(asset.pk, token, failure=exc)
        raise services.job_error_for(exc) from exc
    except BaseException:
        services.asset_release(asset.pk, token)
        raise


def make(ctx, download, asset, parent, token):
    edit = Edit.parse(asset.edit)
    source = storage.absolute(parent.file)
    staging = storage.staging_dir(asset.pk)
    storage.discard_partial(asset.pk)  # an edit never resumes: start clean
    staging.mkdir(parents=True, exist_ok=True)
    ctx.progress(0.0, phase="editing", message=progress.encode(), force=True)
    info = ffmpeg.probe(source)
    argv, output, length_s, copied = plan(edit, source, info, staging)
    run_ffmpeg(ctx, argv, length_s, staging)
    size = output.stat().st_size
    result = ffmpeg.probe(output)
    relative = storage.place(asset.pk, output)
    ctx.progress(1.0, phase="finishing", message=progress.encode(bytes_done=size, bytes_total=size),
                 force=True)
    try:
        with transaction.atomic():
            services.lock_owner(download.owner)
            services.quota_check(download.owner, asset.pk, size)
            if not services.asset_ready(asset.pk, token, file=relative, size_bytes=size,
                                        title=parent.title, duration_s=result["duration_s"],
                                        metadata={"edit": edit.spec, "copied": copied,
                                                  "container": result["container"]}):
                raise Retry(_("This attempt lost the edit to another one."), code="asset_busy")
            services.download_succeeded(download.pk)
            shots.asset_segment_if_wanted(asset.pk, owner=download.owner, after=ctx.job)
    except QuotaExceeded:
        storage.discard_files(asset.pk)
        raise
    storage.discard_partial(asset.pk)
    return {"asset": asset.pk, "size_bytes": size, "copied": copied}


def plan(edit, source, info, staging):
    """(ffmpeg argv, output path, output length in seconds, whether streams are copied)."""
    duration_s = info.get("duration_s") or 0.0
    streams = {s["type"] for s in info["streams"]}
    container = info["container"]
    if edit.op == "audio":
        if "audio" not in streams:
            raise PostprocessFailed("The file has no audio.", message=_("This file has no sound."))
        codec = next(s["codec"] for s in info["streams"] if s["type"] == "audio")
        output = staging / "edit.m4a"
        copied = codec == "aac"
        if copied:
            args = ["-map", "0:a:0", "-vn", "-c", "copy"]
        else:
            args = ["-map", "0:a:0", "-vn", "-c:a", "aac", "-b:a", "160k"]
        argv = ffmpeg.ffmpeg_command([source], output, output_args=args, output_format="ipod",
                                     progress=True)
        return argv, output, duration_s, copied
    start_s, end_s = edit.start_s, min(edit.end_s, duration_s or edit.end_s)
    if end_s - start_s < MIN_TRIM_S:
        raise PostprocessFailed(f"The cut {start_s}-{end_s} s is empty for a {duration_s} s file.",
                                message=_("The cut lies outside the video."))
    length_s = end_s - start_s
    muxer, suffix = MUXERS.get(container, ("mp4", ".mp4"))
    seek = ["-ss", f"{start_s:.3f}"] if start_s > 0 else []
    copied = "video" not in streams or starts_on_keyframe(source, start_s)
    if copied:
        args = ["-t", f"{length_s:.3f}", "-map", "0", "-c", "copy", "-avoid_negative_ts",
                "make_zero"]
    else:
        # Between keyframes: decode from the one before and encode from the exact frame.
        muxer, suffix = "mp4", ".mp4"
        args = ["-t", f"{length_s:.3f}", "-map", "0:v:0", "-map", "0:a:0?", "-c:v", "libx264",
                "-preset", "veryfast", "-crf", "20", "-pix_fmt", "yuv420p", "-c:a", "aac",
                "-movflags", "+faststart"]
    output = staging / f"edit{suffix}"
    argv = ffmpeg.ffmpeg_command([(source, seek)], output, output_args=args, output_format=muxer,
                                 progress=True)
    return argv, output, length_s, copied


def starts_on_keyframe(source, start_s):
    """Whether the first video stream has a keyframe at `start_s` (a copy then starts exactly)."""
    if start_s <= 0:
        return True
    tools = ffmpeg.locate()
    if tools.ffprobe is None:
        return False  # cannot tell without ffprobe: re-encoding is always correct
    container = ffmpeg.sniff(source)
    # Packets only, no decoding: fast even for a long file. The window keeps it short.
    argv = [tools.ffprobe, "-v", "error", *ffmpeg.INPUT_SAFETY, "-f", container.demuxer,
            "-select_streams", "v:0", "-read_intervals", f"{max(0.0, start_s - 10):.3f}%+20",
            "-show_entries", "packet=pts_time,flags", "-of", "json", f"file:{source}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=KEYFRAME_PROBE_TIMEOUT_S)
        packets = json.loads(done.stdout or "{}").get("packets", [])
    except (subprocess.TimeoutExpired, ValueError):
        return False
    return any("K" in p.get("flags", "") and p.get("pts_time") is not None
               and abs(float(p["pts_time"]) - start_s) <= KEYFRAME_TOLERANCE_S for p in packets)


def run_ffmpeg(ctx, argv, length_s, staging):
    """Run ffmpeg, turning each `-progress` line into a progress report (and a sign of life)."""
    log = staging / "ffmpeg.log"
    with open(log, "wb") as errors:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors,
                                   stdin=subprocess.DEVNULL)
        fields = {}
        for raw in process.stdout:
            key, _sep, value = raw.decode("ascii", "replace").strip().partition("=")
            fields[key] = value
            ctx.alive()
            if key == "progress":
                ctx.progress(_fraction(fields, length_s), phase="editing", message=progress.encode(
                    bytes_done=_int(fields.get("total_size")),
                    speed_bytes_s=None, eta_s=None))
        code = process.wait()
    if code != 0:
        last = (Path(log).read_text(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise PostprocessFailed(f"ffmpeg failed ({code}): {last}")


def _fraction(fields, length_s):
    out_us = _int(fields.get("out_time_us") or fields.get("out_time_ms"))
    if not length_s or out_us is None:
        return None
    return max(0.0, min(1.0, out_us / 1_000_000 / length_s))


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def cleanup(job, *, outcome, final):
    """After the child is gone: release the derived asset; an edit's partial is never kept."""
    asset_id = (job.payload or {}).get("asset")
    if asset_id is not None:
        services.asset_release(asset_id, job.lease_token)
        services.asset_collect(asset_id)
