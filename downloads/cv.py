"""Computer vision on a local video file: its shots (`segment`) and one clip's measurements
(`analyze`).

The only module that imports PySceneDetect and OpenCV. Plain functions over files, with no
database and no Redis: the CV worker calls them, writes what they return with
`downloads.cvresults`, and relays progress. Both take two optional callables, always called on
the caller's thread:

- ``report(fraction, phase=, message=)``: progress in [0, 1] (a handler passes `ctx.progress`), at most about twice a second plus
  once per phase change. `message` is English marked with `gettext_noop`; translate it where it
  is shown.
- ``should_stop()``: polled about five times a second; when it returns true the function stops
  its work (and any ffmpeg it started) and raises `Cancelled`.

Every value returned is JSON-safe (str, int, float, list, dict) and every path in it is relative
to `out_dir`.
"""

import enum
import math
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np
from django.utils.translation import gettext_lazy as _
from scenedetect import AdaptiveDetector, SceneManager, VideoOpenFailure, VideoStreamCv2

from downloads import ffmpeg
from downloads.errors import NotMedia


def gettext_noop(message):
    """Mark `message` for translation where it is displayed (Django's needs settings to import)."""
    return message


class Phase(enum.StrEnum):
    """What the work is doing, as passed to `report`."""

    DETECTING = "detecting"  # decoding every frame and comparing it with the previous one
    THUMBNAILS = "thumbnails"  # ffmpeg grabbing the middle frame of each shot
    ANALYZING = "analyzing"  # decoding the clip and measuring sampled frames
    DONE = "done"  # the result is complete; only the caller's write is left


# Shot detection. AdaptiveDetector compares each frame's content change with the average
# change of its neighbours, so fast camera motion inside a shot is not mistaken for a cut; it
# still reports a hard cut on the exact first frame of the new shot.
DOWNSCALE_TO_PX = 256  # least width frames are shrunk to before comparison (as PySceneDetect)
MIN_SHOT_S = 0.5  # two cuts closer than this are merged into one
DETECTING_SHARE = 0.9  # of the progress bar; thumbnails take the rest

THUMBNAIL_WIDTH_PX = 320
THUMBNAIL_DIR = "thumbnails"
# One ffmpeg grabs this many thumbnails: its start-up costs more than one seek and decode
# (measured: 10 thumbnails of a 480p video take 1.0 s in ten processes, 0.37 s in one).
THUMBNAILS_PER_FFMPEG = 16
FFMPEG_TIMEOUT_S = 120  # for one batch of thumbnails; a healthy one takes well under a second

# Clip analysis.
SAMPLE_RATE_HZ = 4  # motion, brightness and colours are measured on this many frames a second
MEASURE_WIDTH_PX = 160  # frames are shrunk to this width before measuring
COLOR_COUNT = 5  # dominant colours returned at most
COLOR_MIN_SHARE = 0.01  # a "dominant" colour covering less than this is noise
COLOR_PIXELS_MAX = 50_000  # pixels given to k-means; more only slows it down
STRIP_FRAMES = 8
STRIP_TILE_WIDTH_PX = 160
STRIP_NAME = "keyframes.jpg"
JPEG_QUALITY = 85

REPORT_INTERVAL_S = 0.5
STOP_POLL_INTERVAL_S = 0.2

# What videos are read from, as `ffmpeg.sniff()` names containers: those whose index lets ffmpeg
# seek to a thumbnail's frame. MPEG-TS has none, and a seek in it can find no frame at all.
VIDEO_CONTAINERS = {"mp4", "matroska", "flv"}


class CVError(Exception):
    """A video could not be processed; `code` names the cause and `message` is for users."""

    code = "cv_failed"
    message = _("The video could not be analysed.")

    def __init__(self, detail=""):
        super().__init__(detail)
        self.detail = detail

    def __str__(self):
        return self.detail or str(self.message)


class MissingVideo(CVError):
    """The video file does not exist (it was deleted or never finished downloading)."""

    code = "missing_video"
    message = _("The video file is missing.")


class UnreadableVideo(CVError):
    """The file is not a video container we read, or it is corrupt or has no frames."""

    code = "unreadable_video"
    message = _("The file is not a readable video.")


class InvalidClip(CVError):
    """The clip's start and end do not describe a non-empty part of the video."""

    code = "invalid_clip"
    message = _("The clip is outside the video or empty.")


class ThumbnailFailed(CVError):
    """ffmpeg could not make a shot's thumbnail (it failed or ran past its timeout)."""

    code = "thumbnail_failed"
    message = _("The shot thumbnails could not be made.")


class WriteFailed(CVError):
    """An image could not be written to the output folder (disk full, permissions)."""

    code = "write_failed"
    message = _("The analysis images could not be saved.")


class Cancelled(CVError):
    """`should_stop()` returned true; the work stopped and its partial output is meaningless."""

    code = "cancelled"
    message = _("The analysis was stopped.")


def segment(video_path, *, out_dir, report=None, should_stop=None,
            downscale_to=DOWNSCALE_TO_PX):
    """Split a video into shots and write one JPEG thumbnail per shot under `out_dir`.

    Before comparison, frames are shrunk by the largest whole factor that keeps them at least
    `downscale_to` pixels wide (None: full size). Returns::

        {"kind": "segment", "fps": 25.0, "frame_count": 500, "duration_s": 20.0,
         "width": 320, "height": 240, "detector": {...},
         "shots": [{"index": 0, "start_s": 0.0, "end_s": 5.0, "start_frame": 0,
                    "end_frame": 125, "thumbnail": "thumbnails/0000.jpg"}, ...]}

    `end_frame`/`end_s` are exclusive: the first frame of the next shot. A video without cuts
    is one shot.
    """
    pacer = _Pacer(report, should_stop)
    pacer.check()
    container = _sniff(video_path)
    out_dir = Path(out_dir)
    video = _open_stream(video_path)
    try:
        width, height = video.frame_size
        scenes = _detect(video, pacer, downscale_to=downscale_to)
    finally:
        video.capture.release()  # now, not when a traceback holding it is collected
    if video.frames_read == 0:
        raise UnreadableVideo(f"{video_path}: no frame could be decoded")
    fps = float(video.frame_rate)
    shots = [
        {
            "index": index,
            "start_s": round(start.seconds, 3),
            "end_s": round(end.seconds, 3),
            "start_frame": start.frame_num,
            "end_frame": end.frame_num,
            "thumbnail": f"{THUMBNAIL_DIR}/{index:04d}.jpg",
        }
        for index, (start, end) in enumerate(scenes)
    ]
    _make_thumbnails(video_path, container, shots, out_dir, pacer)
    pacer.progress(1.0, Phase.DONE, gettext_noop("Shots found"), force=True)
    return {
        "kind": "segment",
        "fps": round(fps, 3),
        "frame_count": video.frames_read,
        "duration_s": round(video.frames_read / fps, 3),
        "width": width,
        "height": height,
        "detector": {"name": "adaptive", "min_shot_s": MIN_SHOT_S, "downscale_to": downscale_to},
        "shots": shots,
    }


def analyze(video_path, *, start_s, end_s, out_dir, report=None, should_stop=None):
    """Measure the clip [start_s, end_s) of a video and write its keyframe strip under `out_dir`.

    Returns::

        {"kind": "analyze", "start_s": 5.0, "end_s": 10.0, "duration_s": 5.0, "fps": 25.0,
         "frame_count": 125, "brightness": 0.42, "motion": [[0.0, 0.013], [0.25, 0.011], ...],
         "motion_mean": 0.012, "colors": [{"hex": "#fe0000", "share": 0.97}, ...],
         "keyframe_strip": "keyframes.jpg", "keyframe_times_s": [5.32, ...],
         "strip_tile": [160, 120]}

    Brightness and motion are fractions of full scale (0 = black / still, 1 = white / every
    pixel flipping between black and white). Motion is the mean absolute difference between a
    sampled frame and the next one, in greyscale, SAMPLE_RATE_HZ times a second; its times are
    seconds from the clip's start. Colours are k-means centres of the sampled frames' pixels,
    largest share first. The strip is STRIP_FRAMES evenly spaced frames side by side, each
    STRIP_TILE_WIDTH_PX wide (fewer tiles when the clip has fewer frames).
    """
    pacer = _Pacer(report, should_stop)
    pacer.check()
    if not (math.isfinite(start_s) and math.isfinite(end_s) and 0 <= start_s < end_s):
        raise InvalidClip(f"start_s={start_s!r} end_s={end_s!r}")
    _sniff(video_path)
    capture = cv2.VideoCapture(os.fspath(video_path), cv2.CAP_FFMPEG)
    try:
        return _measure_clip(capture, video_path, start_s, end_s, Path(out_dir), pacer)
    finally:
        capture.release()


# -- segment ---------------------------------------------------------------------------------


class _CountingStream(VideoStreamCv2):
    """OpenCV stream that counts decoded frames, so the caller's thread can report progress
    without touching the capture the decoding thread is using."""

    frames_read = 0

    def read(self, decode=True):
        frame = super().read(decode)
        if frame is not False:
            # Written only by PySceneDetect's decoding thread; a stale read is harmless.
            self.frames_read += 1
        return frame


def _open_stream(video_path):
    try:
        return _CountingStream(os.fspath(video_path))
    except VideoOpenFailure as exc:
        raise UnreadableVideo(f"{video_path}: OpenCV cannot open it ({exc})".strip()) from None
    except OSError as exc:
        raise MissingVideo(f"{video_path}: {exc}") from None


def _detect(video, pacer, *, downscale_to):
    """Run PySceneDetect over the whole stream and return its (start, end) FrameTimecodes."""
    manager = SceneManager()
    manager.auto_downscale = False
    width = video.frame_size[0]
    manager.downscale = max(1, width // downscale_to) if downscale_to else 1
    manager.add_detector(AdaptiveDetector(min_scene_len=MIN_SHOT_S))
    total_frames = video.duration.frame_num if video.duration else 0
    failure = []

    def run():
        try:
            manager.detect_scenes(video)
        except Exception as exc:  # re-raised on the caller's thread below
            failure.append(exc)

    # detect_scenes() blocks until the end of the video and calls nothing of ours per frame,
    # so it runs on a thread of its own while this one reports progress and polls for a stop.
    # SceneManager.stop() is thread-safe and ends it within a frame.
    detecting = threading.Thread(target=run, name="cv-segment", daemon=True)
    detecting.start()
    try:
        pacer.progress(0.0, Phase.DETECTING, gettext_noop("Finding shot boundaries"), force=True)
        while detecting.is_alive():
            detecting.join(STOP_POLL_INTERVAL_S)
            done = video.frames_read / total_frames if total_frames else 0.0
            pacer.progress(DETECTING_SHARE * min(done, 1.0), Phase.DETECTING,
                           gettext_noop("Finding shot boundaries"))
    finally:
        manager.stop()
        detecting.join()
    if failure:
        raise UnreadableVideo(f"decoding failed: {failure[0]!r}") from failure[0]
    return manager.get_scene_list(start_in_scene=True)


def _make_thumbnails(video_path, container, shots, out_dir, pacer):
    """One JPEG per shot, from its middle, in batches of THUMBNAILS_PER_FFMPEG per ffmpeg."""
    (out_dir / THUMBNAIL_DIR).mkdir(parents=True, exist_ok=True)
    message = gettext_noop("Making thumbnails")
    pacer.progress(DETECTING_SHARE, Phase.THUMBNAILS, message, force=True)
    for first in range(0, len(shots), THUMBNAILS_PER_FFMPEG):
        batch = shots[first:first + THUMBNAILS_PER_FFMPEG]
        grabs = [((shot["start_s"] + shot["end_s"]) / 2, out_dir / shot["thumbnail"])
                 for shot in batch]
        for _time_s, path in grabs:
            path.unlink(missing_ok=True)  # a retry must not pass on an earlier attempt's file
        _run_ffmpeg(thumbnail_argv(video_path, container, grabs), pacer)
        for _time_s, path in grabs:
            if not _is_jpeg(path):
                raise ThumbnailFailed(f"ffmpeg wrote no JPEG at {path}")
        done = (first + len(batch)) / len(shots)
        pacer.progress(DETECTING_SHARE + (1 - DETECTING_SHARE) * done, Phase.THUMBNAILS, message)


def thumbnail_argv(video_path, container, grabs, *, width_px=THUMBNAIL_WIDTH_PX):
    """ffmpeg arguments writing, for each (time_s, jpeg_path) in `grabs`, the frame at that time
    of the local file `video_path` (whose `ffmpeg.sniff()` Container is `container`) scaled to
    `width_px` wide (never enlarged).

    Each input is opened as `ffmpeg.input_args` opens every downloaded file (its demuxer named,
    local files only: per-input options, hence repeated); the "file:" prefixes keep a name
    starting with "-" or holding ":" from being read as an option or a protocol.
    """
    argv = [ffmpeg.locate().ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    source = os.path.abspath(video_path)
    for time_s, _jpeg_path in grabs:
        # -ss before -i seeks the input: fast (from the previous keyframe) and frame-accurate.
        argv += ["-ss", f"{time_s:.3f}", *ffmpeg.input_args(source, container)]
    for index, (_time_s, jpeg_path) in enumerate(grabs):
        argv += ["-map", f"{index}:v:0", "-frames:v", "1",
                 "-vf", f"scale=w='min({width_px},iw)':h=-2", "-q:v", "3",
                 # -update 1: one image, no "%d" pattern expanded in the name
                 "-f", "image2", "-update", "1", "file:" + os.path.abspath(jpeg_path)]
    return argv


def _run_ffmpeg(argv, pacer):
    """Run ffmpeg to completion, killing it on a stop request or past FFMPEG_TIMEOUT_S."""
    deadline = time.monotonic() + FFMPEG_TIMEOUT_S
    # stderr goes to a file, not a pipe nobody reads while waiting: a chatty ffmpeg would fill
    # the pipe and block forever.
    with tempfile.TemporaryFile() as stderr:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=stderr)
        except OSError as exc:
            raise ThumbnailFailed(f"cannot start {argv[0]}: {exc}") from None
        try:
            while True:
                try:
                    process.wait(STOP_POLL_INTERVAL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.monotonic() > deadline:
                    raise ThumbnailFailed(f"ffmpeg ran for more than {FFMPEG_TIMEOUT_S} s")
                pacer.check()
        finally:
            if process.returncode is None:
                # Our own child, killed by its pid: nothing else holds the half-written JPEGs.
                process.kill()
                process.wait()
        if process.returncode != 0:
            stderr.seek(0)
            tail = stderr.read()[-2000:].decode("utf-8", "replace").strip()
            raise ThumbnailFailed(f"ffmpeg exited with {process.returncode}: {tail}")


def _is_jpeg(path):
    try:
        with open(path, "rb") as file:
            return file.read(3) == b"\xff\xd8\xff"
    except FileNotFoundError:
        return False


# -- analyze ---------------------------------------------------------------------------------


def _measure_clip(capture, video_path, start_s, end_s, out_dir, pacer):
    fps = capture.get(cv2.CAP_PROP_FPS)
    if not capture.isOpened() or not fps or not math.isfinite(fps) or fps <= 0:
        raise UnreadableVideo(f"{video_path}: OpenCV cannot open it")
    first = round(start_s * fps)
    stop = round(end_s * fps)  # exclusive
    reported_frames = capture.get(cv2.CAP_PROP_FRAME_COUNT)  # an estimate for some containers
    known_frames = int(reported_frames) if math.isfinite(reported_frames) else 0
    if known_frames > 0:
        stop = min(stop, known_frames)
    if stop <= first:
        raise InvalidClip(f"{start_s}-{end_s} s holds no frame of a {known_frames}-frame video")
    count = stop - first

    sample_step = fps / SAMPLE_RATE_HZ
    samples = {first + int(k * sample_step) for k in range(max(1, math.ceil(count / sample_step)))}
    tiles = min(STRIP_FRAMES, count)
    strip_frames = [first + int((j + 0.5) * count / tiles) for j in range(tiles)]
    wanted = samples | {index + 1 for index in samples} | set(strip_frames)

    if first and not capture.set(cv2.CAP_PROP_POS_FRAMES, first):
        raise UnreadableVideo(f"{video_path}: cannot seek to frame {first}")
    message = gettext_noop("Measuring the clip")
    pacer.progress(0.0, Phase.ANALYZING, message, force=True)
    greys = {}  # sampled frame index -> its greyscale, until its successor arrives
    motion = []
    brightness = []
    pixels = []
    tiles_bgr = []
    decoded = 0
    for index in range(first, stop):
        if not capture.grab():
            break
        decoded += 1
        pacer.progress((index - first + 1) / count, Phase.ANALYZING, message)
        if index not in wanted:
            continue  # grab() without retrieve() skips the costly colour conversion
        ok, frame = capture.retrieve()
        if not ok:
            break
        small = _shrink(frame, MEASURE_WIDTH_PX)
        grey = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
        if index - 1 in greys:
            difference = cv2.absdiff(grey, greys.pop(index - 1))
            motion.append([round((index - 1 - first) / fps, 3), float(difference.mean()) / 255])
        if index in samples:
            greys[index] = grey
            brightness.append(float(grey.mean()) / 255)
            pixels.append(_shrink(small, 24).reshape(-1, 3))
        if index in strip_frames:
            tiles_bgr.append(_shrink(frame, STRIP_TILE_WIDTH_PX))
    if decoded == 0 and first > 0:
        raise InvalidClip(f"nothing to decode at {start_s} s: the clip is past the end")
    if decoded == 0 or not brightness:
        raise UnreadableVideo(f"{video_path}: no frame could be decoded at {start_s} s")

    out_dir.mkdir(parents=True, exist_ok=True)
    tile_height, tile_width = tiles_bgr[0].shape[:2]
    strip = np.hstack([cv2.resize(tile, (tile_width, tile_height)) for tile in tiles_bgr])
    _write_jpeg(out_dir / STRIP_NAME, strip)
    pacer.progress(1.0, Phase.DONE, gettext_noop("Clip measured"), force=True)
    return {
        "kind": "analyze",
        "start_s": round(first / fps, 3),
        "end_s": round((first + decoded) / fps, 3),
        "duration_s": round(decoded / fps, 3),
        "fps": round(fps, 3),
        "frame_count": decoded,
        "brightness": round(sum(brightness) / len(brightness), 4),
        "motion": [[t, round(value, 5)] for t, value in motion],
        "motion_mean": round(sum(v for _, v in motion) / len(motion), 5) if motion else 0.0,
        "colors": dominant_colors(np.concatenate(pixels)),
        "keyframe_strip": STRIP_NAME,
        "keyframe_times_s": [round(index / fps, 3) for index in strip_frames[:len(tiles_bgr)]],
        "strip_tile": [tile_width, tile_height],
    }


def dominant_colors(pixels_bgr, *, count=COLOR_COUNT):
    """The main colours of an (N, 3) uint8 BGR pixel array: k-means centres as
    [{"hex": "#rrggbb", "share": 0.42}, ...], largest share first, shares summing to about 1."""
    pixels = pixels_bgr[:: max(1, len(pixels_bgr) // COLOR_PIXELS_MAX)].astype(np.float32)
    # k cannot exceed the distinct colours present (a single-colour clip has one cluster).
    k = min(count, len(np.unique(pixels, axis=0)))
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 20, 1.0)
    cv2.setRNGSeed(0)  # the same clip always gives the same colours (the RNG is per thread)
    _, labels, centres = cv2.kmeans(pixels, k, None, criteria, 3, cv2.KMEANS_PP_CENTERS)
    shares = np.bincount(labels.ravel(), minlength=k) / len(labels)
    by_hex = {}
    for (blue, green, red), share in zip(np.clip(np.rint(centres), 0, 255).astype(int), shares,
                                         strict=True):
        key = f"#{red:02x}{green:02x}{blue:02x}"
        by_hex[key] = by_hex.get(key, 0.0) + float(share)
    ranked = sorted(by_hex.items(), key=lambda item: -item[1])
    return [{"hex": key, "share": round(share, 4)} for key, share in ranked
            if share >= COLOR_MIN_SHARE]


def _shrink(frame, width_px):
    """`frame` scaled to `width_px` wide keeping its aspect ratio (never enlarged)."""
    height, width = frame.shape[:2]
    if width <= width_px:
        return frame
    size = (width_px, max(1, round(height * width_px / width)))
    return cv2.resize(frame, size, interpolation=cv2.INTER_AREA)


def _write_jpeg(path, image):
    # Written beside its final name and renamed, so a reader never sees half an image.
    partial = path.with_name(f".{path.name}.partial.jpg")
    if not cv2.imwrite(os.fspath(partial), image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]):
        partial.unlink(missing_ok=True)
        raise WriteFailed(f"cannot write {path}")
    os.replace(partial, path)


# -- shared ----------------------------------------------------------------------------------


def _sniff(video_path):
    """The container `video_path` holds (`ffmpeg.sniff()`, the one rule for what may be opened),
    when it is one of VIDEO_CONTAINERS; every refusal is one of this module's errors.

    OpenCV lets ffmpeg guess the format from the content: without this check a playlist saved as
    "video.mp4" would be read as HLS and could pull in other local files.
    """
    try:
        container = ffmpeg.sniff(video_path)
    except FileNotFoundError:
        raise MissingVideo(f"{video_path} does not exist") from None
    except IsADirectoryError:
        raise UnreadableVideo(f"{video_path} is a directory") from None
    except NotMedia as exc:
        raise UnreadableVideo(f"{video_path}: {exc}") from None
    if container.name not in VIDEO_CONTAINERS:
        raise UnreadableVideo(f"{video_path}: {container.name}, not an MP4, Matroska/WebM or FLV file")
    return container


class _Pacer:
    """Calls `report` at most every REPORT_INTERVAL_S (and at each phase change) and
    `should_stop` at most every STOP_POLL_INTERVAL_S, raising Cancelled when it says so."""

    def __init__(self, report, should_stop):
        self._report = report
        self._should_stop = should_stop
        self._reported_at = -math.inf
        self._polled_at = -math.inf
        self._phase = None

    def check(self, *, force=False):
        now = time.monotonic()
        if self._should_stop is None or (not force and now - self._polled_at < STOP_POLL_INTERVAL_S):
            return
        self._polled_at = now
        if self._should_stop():
            raise Cancelled("stopped on request")

    def progress(self, fraction, phase, message, *, force=False):
        self.check(force=force)
        now = time.monotonic()
        if self._report is None:
            return
        if not force and phase == self._phase and now - self._reported_at < REPORT_INTERVAL_S:
            return
        self._reported_at = now
        self._phase = phase
        self._report(round(min(max(fraction, 0.0), 1.0), 4), phase=str(phase), message=message)


__all__ = [
    "CVError", "Cancelled", "InvalidClip", "MissingVideo", "Phase", "ThumbnailFailed",
    "UnreadableVideo", "WriteFailed", "analyze", "dominant_colors", "segment", "thumbnail_argv",
]
