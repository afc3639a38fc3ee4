"""Downloading one URL with yt-dlp: the only module that imports it.

`run_download()` drives yt-dlp's Python API with a fixed options dictionary
(`build_options()`), inside the egress guard, into a staging folder the
caller owns, and turns every failure into one of downloads.errors. It is
meant to run in a supervised child process: the supervisor watches the
progress it reports and kills it when it stalls.

    result = run_download(url, fmt="best", staging_dir=folder,
                          on_progress=write_row, should_stop=stop_requested.is_set)

Every HTTP reply yt-dlp opens is read through `ReplyCaps`: what is read whole
into memory (a page, JSON, a playlist), and any reply whose type is not media,
stops at DOWNLOADS_MAX_PAGE_BYTES; no reply passes the download's byte limit.

Staging contract: a file in `staging_dir` is either the finished result or a
partial one (`*.part`, `*.ytdl`). Cancelled (pause or cancel) leaves the
partial so the same call resumes from it; the caller deletes it with
`discard_staging()` when the download is cancelled for good. Every other
failure removes the partial itself, so a retry starts clean and nothing over
a size limit remains.
"""

import contextlib
import errno
import io
import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yt_dlp
import yt_dlp.postprocessor
from django.utils.translation import gettext_lazy as _
from yt_dlp.globals import plugin_dirs
from yt_dlp.networking import HEADRequest
from yt_dlp.networking.common import Response
from yt_dlp.networking.exceptions import (
    HTTPError,
    NoSupportingHandlers,
    RequestError,
    TransportError,
    UnsupportedRequest,
)
from yt_dlp.postprocessor import FFmpegPostProcessor
from yt_dlp.postprocessor.common import PostProcessor
from yt_dlp.utils import (
    ContentTooShortError,
    ExtractorError,
    PostProcessingError,
    UnsupportedError,
    YoutubeDLError,
)

from downloads import conf, egress
from downloads.addresses import InvalidURL, validate_url
from downloads.errors import (
    BlockedDestination,
    Cancelled,
    DownloadFailed,
    NetworkFailed,
    PostprocessFailed,
    StorageFull,
    TooLarge,
    Unavailable,
    UnsupportedURL,
)
from downloads.ffmpeg import INPUT_SAFETY, locate, probe, sniff

log = logging.getLogger(__name__)

# No plugins: yt-dlp would otherwise import code from user folders and sys.path.
plugin_dirs.value = []

FORMATS = ("best", "audio", "720p")
# Protocols fetched by yt-dlp's own downloaders, whose every connection passes
# the egress guard. ffmpeg, rtmpdump and friends would fetch from outside it.
PROTOCOLS = ("http", "https", "m3u8", "m3u8_native", "http_dash_segments")
ONLY_OUR_PROTOCOLS = f"[protocol~='^({'|'.join(PROTOCOLS)})$']"
FORMAT_SELECTORS = {
    "best": "bv*{p}+ba{p}/b{p}",
    "720p": "bv*[height<=?720]{p}+ba{p}/b[height<=?720]{p}",
    "audio": "ba{p}/b{p}",
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What a server calls a file to save rather than a document to read. A reply
# of another type, or of none, is a page to yt-dlp, read whole into memory.
MEDIA_TYPE = re.compile(
    r"^(?:(?:video|audio|image)/|(?:application|binary)/(?:x-)?octet-stream\b"
    r"|application/(?:x-)?(?:force-)?download\b|application/(?:mp4|ogg|x-matroska)\b)")
READ_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class DownloadResult:
    path: Path  # the (first) finished file, inside the staging folder
    title: str
    duration_s: float | None
    size_bytes: int
    info: dict = field(default_factory=dict)  # a JSON-safe subset of yt-dlp's info
    files: tuple = ()  # every finished file (several for a playlist)


# --- Options ----------------------------------------------------------------

def ffmpeg_input_args():
    """postprocessor_args that put INPUT_SAFETY before every input of every ffmpeg post-processor.

    yt-dlp looks these up per post-processor ("<name>+ffmpeg_i"), with no
    catch-all for inputs, so each one is named.
    """
    names = sorted(
        obj.pp_key().lower() for obj in vars(yt_dlp.postprocessor).values()
        if isinstance(obj, type) and issubclass(obj, FFmpegPostProcessor)
    )
    return {f"{name}+ffmpeg_i": list(INPUT_SAFETY) for name in names}


def build_options(*, fmt, staging_dir, allow_playlist=False, playlist_limit=None,
                  ffmpeg_location=None, socket_timeout_s=None, retries=None, logger=None,
                  progress_hooks=(), postprocessor_hooks=()):
    """The fixed yt-dlp options for one download; nothing here comes from the user but `fmt`.

    The Python API reads no configuration files (those are a command-line
    feature) and runs no --exec: post-processors are exactly the list below.
    """
    if fmt not in FORMATS:
        raise ValueError(f"Unknown download format {fmt!r}; use one of {', '.join(FORMATS)}.")
    staging_dir = str(staging_dir)
    retries = conf.retries() if retries is None else retries
    options = {
        "format": FORMAT_SELECTORS[fmt].format(p=ONLY_OUR_PROTOCOLS),
        "paths": {"home": staging_dir, "temp": staging_dir},
        # Names from ids, never titles: one fixed name per download (numbered in a playlist).
        "outtmpl": {"default": "media-%(autonumber)03d.%(ext)s" if allow_playlist
                    else "media.%(ext)s"},
        "restrictfilenames": True,
        "windowsfilenames": True,
        "noplaylist": not allow_playlist,
        "continuedl": True,  # resume from a .part left by a pause
        "nopart": False,
        "updatetime": False,
        "merge_output_format": "mp4/mkv",
        "concat_playlist": "never",
        "fixup": "detect_or_warn",
        # yt-dlp's own downloaders only: native HLS/DASH, never ffmpeg or another program.
        "external_downloader": {"default": "native"},
        "hls_prefer_native": True,
        "hls_use_mpegts": False,
        # Should ffmpeg be asked to download anyway, it cannot open anything but local files.
        "external_downloader_args": {"ffmpeg_i": list(INPUT_SAFETY)},
        "postprocessor_args": ffmpeg_input_args(),
        "ffmpeg_location": ffmpeg_location or locate().ffmpeg,
        "postprocessors": [],
        "concurrent_fragment_downloads": 1,  # hooks run in this thread, so they can stop it
        "skip_unavailable_fragments": False,  # a gap is an error, not a shorter video
        "keep_fragments": False,
        "retries": retries,
        "fragment_retries": retries,
        "extractor_retries": min(retries, 1),
        "file_access_retries": 1,
        "socket_timeout": conf.socket_timeout_s() if socket_timeout_s is None else socket_timeout_s,
        "proxy": "",  # no proxy from the environment: the egress check must see the real peer
        "enable_file_urls": False,
        "cachedir": False,
        "cookiefile": None,
        "cookiesfrombrowser": None,
        "usenetrc": False,
        "writeinfojson": False,
        "writethumbnail": False,
        "writesubtitles": False,
        "writeautomaticsub": False,
        "getcomments": False,
        "allow_unplayable_formats": False,
        "ignoreerrors": False,
        "noprogress": True,
        "quiet": True,
        "color": {"stdout": "no_color", "stderr": "no_color"},
        "consoletitle": False,
        "logger": logger or _Log(),
        "progress_hooks": list(progress_hooks),
        "postprocessor_hooks": list(postprocessor_hooks),
    }
    if allow_playlist:
        options["playlist_items"] = f"1:{playlist_limit or conf.playlist_limit()}"
    if fmt == "audio":
        options["postprocessors"].append(
            {"key": "FFmpegExtractAudio", "preferredcodec": "m4a", "nopostoverwrites": False})
        options["final_ext"] = "m4a"
    return options


class _Log:
    """Routes yt-dlp's messages to logging instead of the terminal."""

    def debug(self, message):
        log.debug("%s", message)

    def info(self, message):
        log.info("%s", message)

    def warning(self, message):
        log.warning("%s", message)

    def error(self, message):
        log.info("%s", message)  # the failure itself reaches the caller as an exception


# --- Reading replies ----------------------------------------------------------

@dataclass(frozen=True)
class ReplyCaps:
    """How much of one HTTP reply may be read: `page_bytes` of a reply read whole or not media,
    `max_bytes` (None: no limit) of any."""

    page_bytes: int
    max_bytes: int | None = None

    def wrap(self, reply):
        """`reply` read through these caps; refused at once when its announced size breaks them."""
        capped = _CappedReply(reply, self)
        announced = reply.headers.get("Content-Length", "")
        if announced.isdigit() and not reply.headers.get("Content-Encoding"):
            limit, page = capped.limit(whole=False)
            if limit is not None and int(announced) > limit:
                reply.close()
                raise capped.refusal(limit, page=page, size_bytes=int(announced))
        return capped


class _CappedReply(Response):
    """A reply that raises TooLarge instead of reading past its caps.

    yt-dlp's extractors read a page whole (`read()`) to look for media in it,
    the generic one whatever type the server gave it, so a read without a size
    is always held to the page limit; the downloaders stream media to disk in
    sized reads, which only a type that is not media holds to it. At most one
    byte past a limit is ever read.
    """

    def __init__(self, reply, caps):
        super().__init__(reply, url=reply.url, headers=reply.headers, status=reply.status,
                         reason=reply.reason, extensions=reply.extensions)
        self.caps = caps
        self.media = bool(MEDIA_TYPE.match((reply.headers.get("Content-Type") or "").lower()))
        self.received = 0

    def limit(self, *, whole):
        """(bytes this reply may deliver, whether that is the page limit) for a read of this kind."""
        page = whole or not self.media
        max_bytes = self.caps.max_bytes
        if page and (max_bytes is None or self.caps.page_bytes < max_bytes):
            return self.caps.page_bytes, True
        return max_bytes, False

    def read(self, amt=None):
        whole = amt is None or amt < 0
        limit, page = self.limit(whole=whole)
        chunks = []
        while True:
            size = READ_CHUNK_BYTES if whole else amt
            if limit is not None:
                size = min(size, limit - self.received + 1)
            data = self.fp.read(size)
            self.received += len(data)
            if limit is not None and self.received > limit:
                raise self.refusal(limit, page=page)
            if not whole:
                return data
            if not data:
                return b"".join(chunks)
            chunks.append(data)

    def refusal(self, limit, *, page, size_bytes=None):
        if not page:
            return _too_large(size_bytes, limit)
        kind = self.headers.get("Content-Type") or "no type"
        return TooLarge(
            f"{self.url} answered with more than {limit} bytes of {kind}, read whole or not "
            f"media: refused (see DOWNLOADS_MAX_PAGE_BYTES).",
            size_bytes=size_bytes, limit_bytes=limit,
            message=_("The address answered with a large page, not a video or audio file."))


# --- Running ----------------------------------------------------------------

class _YoutubeDL(yt_dlp.YoutubeDL):
    """YoutubeDL that reads every reply through `caps` and checks what each downloaded file
    really is before post-processing.

    urlopen() is the one door of yt-dlp's extractors and downloaders to the
    network. post_process() is where yt-dlp starts every post-processor,
    fixups and merges included; files found already complete in the staging
    folder (a resumed download) reach it without passing the download hooks.
    """

    def __init__(self, params, *, caps):
        super().__init__(params)
        self.caps = caps

    def urlopen(self, req):
        try:
            return self.caps.wrap(super().urlopen(req))
        except HTTPError as exc:
            # An extractor may read an error's body: capped, but never refused for its size alone.
            exc.response = _CappedReply(exc.response, self.caps)
            raise

    def post_process(self, filename, info, files_to_move=None):
        for path in info.get("__files_to_merge") or [filename]:
            sniff(path)
        return super().post_process(filename, info, files_to_move)


class _StepPP(PostProcessor):
    """A post-processor that calls `action(info)` at the point it is registered for."""

    def __init__(self, action):
        super().__init__()
        self._action = action

    def run(self, info):
        self._action(info)
        return [], info


class _Run:
    """The state of one run_download() call: progress, limits, what it produced."""

    def __init__(self, *, on_progress, should_stop, max_bytes, allow_playlist, interval_s):
        self.on_progress = on_progress
        self.should_stop = should_stop
        self.max_bytes = max_bytes
        self.allow_playlist = allow_playlist
        self.interval_s = interval_s
        self.file_bytes = {}  # filename -> bytes downloaded so far
        self.file_totals = {}  # filename -> total bytes, exact or estimated
        self.files = []
        self.ydl = None
        self.downloading = False  # past extraction and format selection
        self._last_report_s = None
        self._last_phase = None
        self._fraction = None

    # Hooks ----------------------------------------------------------------
    def download_hook(self, status):
        self.poll_stop()
        name = status.get("filename")
        done = status.get("downloaded_bytes") or 0
        if status["status"] == "downloading":
            self.file_bytes[name] = done
            exact = status.get("total_bytes")
            estimate = exact or status.get("total_bytes_estimate")
            if estimate:
                self.file_totals[name] = estimate
            self.check_size(exact_total=exact, current=name)
            count, index = status.get("fragment_count"), status.get("fragment_index")
            fraction = (index / count) if count and index is not None else self._ratio()
            self.report("downloading", fraction=fraction, speed=status.get("speed"),
                        eta=status.get("eta"))
        elif status["status"] == "finished":
            self.file_bytes[name] = self.file_totals[name] = done or self.file_bytes.get(name, 0)
            sniff(name)  # before a merge or fixup hands it to ffmpeg
            self.report("downloading", fraction=self._ratio(), force=True)

    def postprocessor_hook(self, status):
        self.poll_stop()
        name = status.get("postprocessor") or ""
        # Report ffmpeg's work, not yt-dlp's bookkeeping (MoveFiles) or our own checks.
        if status["status"] == "started" and name != "MoveFiles" and not name.startswith("_"):
            self.report("postprocessing", fraction=1.0, force=True,
                        postprocessor=name)

    def poll_stop(self):
        if self.should_stop is None:
            return
        with egress.trusted():  # the caller's own check may reach its database or Redis
            stop = self.should_stop()
        if stop:
            raise Cancelled("Stopped on request.")

    # Checks ---------------------------------------------------------------
    def refuse_playlist(self):
        if not self.allow_playlist:
            raise UnsupportedURL(
                "The address is a playlist.",
                message=_("This address is a playlist; ask for the playlist to download it."))

    def before_processing(self, info):
        """Refuse a playlist entry reached through a redirect to another extractor."""
        if info.get("playlist_index") is not None:
            self.refuse_playlist()

    def before_download(self, info):
        """Refuse what would leave the egress guard's sight or break the size limit."""
        if info.get("is_live") or info.get("live_status") in ("is_live", "is_upcoming"):
            raise Unavailable("Live streams are not downloaded.",
                              message=_("Live streams cannot be downloaded."))
        formats = info.get("requested_formats") or [info]
        for fmt in formats:
            link = fmt.get("url") or fmt.get("manifest_url") or fmt.get("fragment_base_url")
            if fmt.get("protocol") not in PROTOCOLS or (
                    link and urlsplit(link).scheme not in ("http", "https")):
                raise UnsupportedURL(f"Protocol {fmt.get('protocol')!r} is not downloaded.")
        if self.max_bytes is not None:
            sizes = [fmt.get("filesize") or self._announced_size(fmt) for fmt in formats]
            already = sum(self.file_bytes.values())  # earlier entries of a playlist
            if all(sizes) and already + sum(sizes) > self.max_bytes:
                raise _too_large(already + sum(sizes), self.max_bytes)
        self.downloading = True

    def _announced_size(self, fmt):
        """The Content-Length a HEAD request announces for a plain HTTP format, if any."""
        if fmt.get("protocol") not in ("http", "https"):
            return None
        request = HEADRequest(fmt["url"], headers=fmt.get("http_headers"))
        try:
            with self.ydl.urlopen(request) as reply:
                length = reply.headers.get("Content-Length")
                encoded = reply.headers.get("Content-Encoding")
        except (YoutubeDLError, OSError):
            return None  # no answer to HEAD: the download hook enforces the limit instead
        return int(length) if length and length.isdigit() and not encoded else None

    def check_size(self, *, exact_total, current):
        if self.max_bytes is None:
            return
        others = sum(size for name, size in self.file_bytes.items() if name != current)
        if exact_total is not None and others + exact_total > self.max_bytes:
            raise _too_large(others + exact_total, self.max_bytes)
        if sum(self.file_bytes.values()) > self.max_bytes:
            raise _too_large(None, self.max_bytes)

    def collect(self, info):
        self.files.append(Path(info["filepath"]))

    # Progress -------------------------------------------------------------
    def _ratio(self):
        totals = [self.file_totals.get(name) for name in self.file_bytes]
        if not totals or not all(totals):
            return None
        return sum(self.file_bytes.values()) / sum(totals)

    def report(self, phase, *, fraction=None, speed=None, eta=None, force=False,
               postprocessor=None):
        if fraction is not None:
            # Never backwards: estimates grow, and a second file (audio) starts at 0.
            self._fraction = max(self._fraction or 0.0, min(1.0, fraction))
        now_s = time.monotonic()
        due = (self._last_report_s is None or phase != self._last_phase
               or now_s - self._last_report_s >= self.interval_s)
        if self.on_progress is None or not (due or force):
            return
        self._last_report_s, self._last_phase = now_s, phase
        totals = [self.file_totals.get(name) for name in self.file_bytes]
        progress = {
            "phase": phase,
            "downloaded_bytes": sum(self.file_bytes.values()),
            "total_bytes": int(sum(totals)) if totals and all(totals) else None,
            "speed_bytes_s": speed,
            "eta_s": eta,
            "fraction": self._fraction,
            "postprocessor": postprocessor,
        }
        with egress.trusted():  # the caller writes progress to its own database or Redis
            self.on_progress(progress)


def run_download(url, *, fmt, staging_dir, on_progress=None, should_stop=None, max_bytes=None,
                 allow_playlist=False, playlist_limit=None, ffmpeg_location=None, policy=None,
                 socket_timeout_s=None, retries=None, progress_interval_s=None):
    """Download `url` in format `fmt` ("best", "audio", "720p") into `staging_dir`.

    on_progress(dict) receives phase ("downloading" | "postprocessing"),
    downloaded_bytes, total_bytes, speed_bytes_s, eta_s, fraction (0..1) and
    postprocessor, at most every `progress_interval_s` (plus phase changes).
    should_stop() is asked at every progress tick (many a second: read a flag,
    do not query); True raises Cancelled and keeps the partial file. Over `max_bytes` raises TooLarge: before any byte
    when the size is announced, as soon as the bytes pass it otherwise; so does a page (a
    reply that is not media, or read whole) over DOWNLOADS_MAX_PAGE_BYTES.
    Raises a downloads.errors.DownloadFailed subclass on any failure.
    """
    policy = egress.EgressPolicy.from_conf() if policy is None else policy
    try:
        url = validate_url(url, policy=policy)
    except InvalidURL as exc:
        raise UnsupportedURL(f"Refused URL: {exc.messages[0]}", message=exc.messages[0]) from None
    staging = Path(staging_dir)
    staging.mkdir(parents=True, exist_ok=True)
    interval_s = conf.progress_interval_s() if progress_interval_s is None else progress_interval_s
    run = _Run(on_progress=on_progress, should_stop=should_stop, max_bytes=max_bytes,
               allow_playlist=allow_playlist, interval_s=interval_s)
    options = build_options(
        fmt=fmt, staging_dir=staging, allow_playlist=allow_playlist,
        playlist_limit=playlist_limit, ffmpeg_location=ffmpeg_location,
        socket_timeout_s=socket_timeout_s, retries=retries,
        progress_hooks=[run.download_hook], postprocessor_hooks=[run.postprocessor_hook],
    )
    try:
        run.poll_stop()
        with egress.install(policy) as guard:
            try:
                info = _extract(run, url, options)
            except DownloadFailed:
                raise
            except (YoutubeDLError, OSError) as exc:
                raise _failure(exc, guard, downloading=run.downloading) from exc
        if not run.files:
            raise Unavailable("yt-dlp finished without producing a file.")
        return _result(info or {}, run.files)
    except BaseException as exc:
        _close_files_left_open(exc, staging)
        if isinstance(exc, Exception) and not isinstance(exc, Cancelled):
            # A retry starts clean, and nothing over a size limit stays behind. A
            # pause (Cancelled) keeps the partial to resume from; SystemExit and
            # KeyboardInterrupt mean the process is being stopped, not failing.
            discard_staging(staging)
        raise


def _extract(run, url, options):
    caps = ReplyCaps(page_bytes=conf.max_page_bytes(), max_bytes=run.max_bytes)
    with _YoutubeDL(options, caps=caps) as ydl:
        run.ydl = ydl
        ydl.add_post_processor(_StepPP(run.before_processing), when="pre_process")
        ydl.add_post_processor(_StepPP(run.before_download), when="before_dl")
        ydl.add_post_processor(_StepPP(run.collect), when="after_move")
        # Extract first, then process: a playlist nobody asked for is refused
        # before any of its entries is even looked at.
        found = ydl.extract_info(url, download=False, process=False)
        if found and found.get("_type") in ("playlist", "multi_video"):
            run.refuse_playlist()
        return ydl.process_ie_result(found, download=True)


def list_entries(url, limit=None, *, policy=None, socket_timeout_s=None, retries=None):
    """The entries of a playlist (or the one video of a plain URL), without downloading.

    Returns up to `limit` dicts with id, url, title and duration_s; entries
    whose URL would be refused by run_download() are left out.
    """
    policy = egress.EgressPolicy.from_conf() if policy is None else policy
    try:
        url = validate_url(url, policy=policy)
    except InvalidURL as exc:
        raise UnsupportedURL(f"Refused URL: {exc.messages[0]}", message=exc.messages[0]) from None
    limit = limit or conf.playlist_limit()
    options = {
        "extract_flat": "in_playlist",
        "playlist_items": f"1:{limit}",
        "noplaylist": False,
        "skip_download": True,
        "proxy": "",
        "cachedir": False,
        "enable_file_urls": False,
        "quiet": True,
        "noprogress": True,
        "logger": _Log(),
        "socket_timeout": conf.socket_timeout_s() if socket_timeout_s is None else socket_timeout_s,
        "extractor_retries": min(conf.retries() if retries is None else retries, 1),
        "ignoreerrors": False,
    }
    with egress.install(policy) as guard:
        try:
            with _YoutubeDL(options, caps=ReplyCaps(page_bytes=conf.max_page_bytes())) as ydl:
                info = ydl.extract_info(url, download=False) or {}
        except (YoutubeDLError, OSError) as exc:
            raise _failure(exc, guard) from exc
    entries = info.get("entries") if info.get("_type") in ("playlist", "multi_video") else [info]
    listed = []
    for entry in list(entries or [])[:limit]:
        link = entry.get("webpage_url") or entry.get("url") or ""
        try:
            link = validate_url(link, policy=policy)
        except InvalidURL:
            continue
        listed.append({"id": str(entry.get("id") or ""), "url": link,
                       "title": entry.get("title") or "", "duration_s": entry.get("duration")})
    return listed


def discard_staging(staging_dir):
    """Delete everything a download left in `staging_dir` (a cancel, a failure, a fresh retry)."""
    staging = Path(staging_dir)
    if staging.is_dir():
        shutil.rmtree(staging, ignore_errors=True)


# --- Results and failures ---------------------------------------------------

INFO_KEYS = (
    "id", "title", "duration", "ext", "width", "height", "fps", "vcodec", "acodec", "format_id",
    "extractor_key", "webpage_url", "uploader", "channel", "upload_date", "timestamp",
    "filesize", "tbr", "abr", "vbr", "playlist_count",
)


def _result(info, files):
    path = files[0]
    duration_s = info.get("duration")
    if duration_s is None:
        try:
            duration_s = probe(path)["duration_s"]
        except DownloadFailed:
            duration_s = None
    return DownloadResult(
        path=path,
        title=str(info.get("title") or info.get("id") or ""),
        duration_s=float(duration_s) if duration_s is not None else None,
        size_bytes=path.stat().st_size,
        info={**{key: info[key] for key in INFO_KEYS
                 if isinstance(info.get(key), (str, int, float, bool))},
              "ext": path.suffix.lstrip(".")},  # after post-processing (m4a for audio)
        files=tuple(files),
    )


def _too_large(size_bytes, limit_bytes):
    if size_bytes is None:
        detail = f"More than {limit_bytes} bytes arrived (the server announced no size)."
    else:
        detail = f"The file is {size_bytes} bytes; the limit is {limit_bytes}."
    return TooLarge(detail, size_bytes=size_bytes, limit_bytes=limit_bytes)


def _causes(exc):
    """exc and everything it wraps: __cause__/__context__, yt-dlp's exc_info and cause."""
    seen, pending = [], [exc]
    while pending:
        current = pending.pop(0)
        if not isinstance(current, BaseException) or any(current is s for s in seen):
            continue
        seen.append(current)
        info = getattr(current, "exc_info", None)
        pending += [current.__cause__, current.__context__, getattr(current, "cause", None),
                    getattr(current, "reason", None), info[1] if isinstance(info, tuple) else None]
    return seen


def _close_files_left_open(exc, staging):
    """Close the staging files and HTTP responses an error left open in yt-dlp.

    A hook that raises (a stop, a size limit) or a fragment that fails for
    good unwinds yt-dlp without closing its response (ctx["data"]) or the
    fragment downloader's output (ctx["dest_stream"]). Closing them now
    flushes what was written (a paused download resumes from it) and frees
    sockets and descriptors instead of leaving that to garbage collection.
    """
    root = str(Path(staging).resolve())

    def in_staging(name):
        return isinstance(name, str) and str(Path(name).resolve()).startswith(root)

    for error in _causes(exc):
        tb = error.__traceback__
        while tb is not None:
            for value in list(tb.tb_frame.f_locals.values()):
                for item in _left_open(value, in_staging):
                    with contextlib.suppress(OSError, ValueError, AttributeError):
                        item.close()
            tb = tb.tb_next


def _left_open(value, in_staging):
    """What one local variable of an unwound yt-dlp frame may hold open."""
    # isinstance first: touching attributes of arbitrary objects can be costly
    # (yt-dlp's lazy extractor classes load themselves on attribute access).
    if isinstance(value, Response):
        yield value
    elif isinstance(value, io.IOBase):
        if in_staging(getattr(value, "name", None)):
            yield value
    elif isinstance(value, dict):  # a downloader's ctx
        yield from (item for item in value.values() if isinstance(item, Response))
        if in_staging(value.get("tmpfilename")):
            yield from (value[key] for key in ("dest_stream", "stream") if value.get(key))


def _failure(exc, guard, *, downloading=False):
    """The DownloadFailed that explains a yt-dlp (or OS) error.

    `downloading`: the failure came after extraction, while bytes were being
    fetched; one yt-dlp reports without a cause is then a broken transfer.
    """
    detail = ANSI.sub("", str(exc)).removeprefix("ERROR: ").strip()
    if guard.blocked:
        return BlockedDestination(
            f"Blocked a connection to {guard.blocked[0]}: {detail}", destination=guard.blocked[0])
    causes = _causes(exc)
    for cause in causes:
        if isinstance(cause, DownloadFailed):
            return cause
        if isinstance(cause, egress.EgressBlocked):
            destination = egress.format_destination(cause.host, cause.port)
            return BlockedDestination(detail, destination=destination)
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return StorageFull(detail)
    if "No space left on device" in detail:
        return StorageFull(detail)
    for cause in causes:
        # A plain RequestError is what yt-dlp's HTTP client raises for a request it
        # cannot make at all, such as a redirect to gopher:, dict: or file: (the
        # InvalidSchema inside is an OSError): refused for good, not a network failure.
        if isinstance(cause, (UnsupportedError, UnsupportedRequest, NoSupportingHandlers)) or \
                type(cause) is RequestError:
            return UnsupportedURL(detail)
        if isinstance(cause, HTTPError):
            return NetworkFailed(detail) if cause.status >= 500 else Unavailable(detail)
        if isinstance(cause, (TransportError, ContentTooShortError)):
            return NetworkFailed(detail)
        if isinstance(cause, PostProcessingError):
            return PostprocessFailed(detail)
    if any(isinstance(cause, ExtractorError) for cause in causes):
        return Unavailable(detail)
    if downloading or any(isinstance(cause, OSError) for cause in causes):
        return NetworkFailed(detail)
    return Unavailable(detail)

