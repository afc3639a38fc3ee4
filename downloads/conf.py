"""Download settings: each read from Django settings when defined there, else the environment.

Functions rather than constants so that a test (or an operator editing the
environment of a child process) sees the value in force at the call.
"""

import re

from project import env

_setting = env.setting


def _count(name, default):
    """A whole number of at least 1."""
    return _setting(name, default, lambda n, d: env.get_number(n, d, kind=int, minimum=1))


def egress_allow():
    """DOWNLOADS_EGRESS_ALLOW: comma-separated `ip[/prefix][:port]` destinations a download
    may reach although they are not public (development, tests). Default: none."""
    return _setting("DOWNLOADS_EGRESS_ALLOW", "", env.get_str)


def max_url_length():
    """DOWNLOADS_MAX_URL_LENGTH: longest URL accepted, in characters."""
    return _setting("DOWNLOADS_MAX_URL_LENGTH", 2048,
                    lambda name, default: env.get_number(name, default, kind=int, minimum=16))


def playlist_limit():
    """DOWNLOADS_PLAYLIST_LIMIT: most entries taken from one playlist."""
    return _count("DOWNLOADS_PLAYLIST_LIMIT", 50)


def socket_timeout_s():
    """DOWNLOADS_SOCKET_TIMEOUT_S: seconds a connection may sit idle before it counts as failed."""
    return _setting("DOWNLOADS_SOCKET_TIMEOUT_S", 20.0,
                    lambda name, default: env.get_number(name, default, minimum=0.1))


def retries():
    """DOWNLOADS_RETRIES: attempts yt-dlp makes at a broken transfer or fragment before failing."""
    return _setting("DOWNLOADS_RETRIES", 3,
                    lambda name, default: env.get_number(name, default, kind=int, minimum=0))


def progress_interval_s():
    """DOWNLOADS_PROGRESS_INTERVAL_S: least seconds between two progress reports of a download."""
    return _setting("DOWNLOADS_PROGRESS_INTERVAL_S", 1.0,
                    lambda name, default: env.get_number(name, default, minimum=0))


# --- Quotas (defaults for users without a DownloadQuota row) -----------------

def default_concurrent():
    """DOWNLOADS_DEFAULT_CONCURRENT: downloads one user may have running at once."""
    return _count("DOWNLOADS_DEFAULT_CONCURRENT", 2)


def default_queued():
    """DOWNLOADS_DEFAULT_QUEUED: live downloads (queued, running or paused) one user may hold."""
    return _count("DOWNLOADS_DEFAULT_QUEUED", 20)


def default_storage_bytes():
    """DOWNLOADS_DEFAULT_STORAGE_BYTES: bytes of finished files one user may hold (5 GiB)."""
    return _setting("DOWNLOADS_DEFAULT_STORAGE_BYTES", 5 * 1024**3,
                    lambda name, default: env.get_number(name, default, kind=int, minimum=0))


def max_file_bytes():
    """DOWNLOADS_MAX_FILE_BYTES: largest single file anyone may download; 0 means no cap."""
    return _setting("DOWNLOADS_MAX_FILE_BYTES", 0,
                    lambda name, default: env.get_number(name, default, kind=int, minimum=0))


def default_rate():
    """DOWNLOADS_DEFAULT_RATE: downloads one user may ask for per period ("30/m"), those served
    at once from the cache included, so a burst of cache hits is refused like any other."""
    return _rate("DOWNLOADS_DEFAULT_RATE", "30/m")


def _rate(name, default):
    """A rate setting ("6/m", "3/10s", "100/h"), checked as the engine reads it."""
    from jobs.bounds import parse_rate

    value = str(_setting(name, default, env.get_str)).strip()
    try:
        parse_rate(value)
    except ValueError as exc:
        raise env.SettingsError(f"{name}: {exc}") from None
    return value


# --- Computer vision, per user --------------------------------------------------

def cv_concurrent():
    """DOWNLOADS_CV_CONCURRENT: one user's CV jobs (shot detection, analyses) running at once
    (the engine key "cv-user:<id>"; staff change one user's in their quota)."""
    return _count("DOWNLOADS_CV_CONCURRENT", 2)


def cv_queued():
    """DOWNLOADS_CV_QUEUED: one user's CV jobs queued, running or paused at once; a request past
    it is refused (429). The default of a quota's "CV jobs queued" (staff change it there)."""
    return _count("DOWNLOADS_CV_QUEUED", 20)


def shots_per_request():
    """DOWNLOADS_SHOTS_PER_REQUEST: shots one "Analyse all shots" queues at most (the rest are
    queued by asking again once those are measured)."""
    return _count("DOWNLOADS_SHOTS_PER_REQUEST", 20)


# --- Per site (the registrable domain of a download's URL; downloads/sites.py) ---

def site_rate():
    """DOWNLOADS_SITE_RATE: fetches one site may start across the deployment, as starts per
    period ("6/m", "3/10s", "100/h"). The default of a site's rate limit; staff change one
    site's live in the admin (Rate limits, key site:<domain>)."""
    return _rate("DOWNLOADS_SITE_RATE", "6/m")


def site_concurrency():
    """DOWNLOADS_SITE_CONCURRENCY: fetches of one site running at once across the deployment.
    Read when the kinds are registered (process start)."""
    return _count("DOWNLOADS_SITE_CONCURRENCY", 3)


# --- The download and edit jobs -----------------------------------------------

def stall_timeout_s():
    """DOWNLOADS_STALL_TIMEOUT_S: seconds without a byte (or an ffmpeg progress line) before a
    download or edit is stopped as stalled. Read when the kinds are registered (process start)."""
    return _setting("DOWNLOADS_STALL_TIMEOUT_S", 60.0,
                    lambda name, default: env.get_number(name, default, minimum=0.5))


def kill_grace_s():
    """DOWNLOADS_KILL_GRACE_S: seconds between TERM and KILL when a download is stopped."""
    return _setting("DOWNLOADS_KILL_GRACE_S", 5.0,
                    lambda name, default: env.get_number(name, default, minimum=0))


def wall_clock_cap_s():
    """DOWNLOADS_WALL_CLOCK_CAP_S: the longest one attempt of a download may run (6 hours)."""
    return _setting("DOWNLOADS_WALL_CLOCK_CAP_S", 6 * 3600.0,
                    lambda name, default: env.get_number(name, default, minimum=1))


def memory_limit_bytes():
    """DOWNLOADS_MEMORY_LIMIT: the most memory (heap and other private writable memory,
    RLIMIT_DATA) each process of a download or an edit may use (the child and each ffmpeg it
    starts), e.g. 2G; 0 means no cap. A real download's child uses about 80 MiB and an ffmpeg
    re-encoding 1080p about 450 MiB on two cores; ffmpeg's threads (8 MiB of stack each) grow
    with the cores. Read when the kinds are registered (process start)."""
    return memory_bytes("DOWNLOADS_MEMORY_LIMIT", 2 * 1024**3)


def max_page_bytes():
    """DOWNLOADS_MAX_PAGE_BYTES: the most of one reply a download or a subscription check reads
    when yt-dlp holds it in memory (a web page, JSON, a playlist) or its type is not media,
    e.g. 8M; past it the download fails as too large. Media streams to disk, bounded by the
    size limits instead. A big site's video page is a megabyte or two of HTML."""
    raw = _setting("DOWNLOADS_MAX_PAGE_BYTES", 8 * 1024**2, env.get_str)
    value = parse_bytes("DOWNLOADS_MAX_PAGE_BYTES", raw)
    if value < 64 * 1024:
        raise env.SettingsError(f"DOWNLOADS_MAX_PAGE_BYTES must be at least 64K, not {raw!r}.")
    return value


def segment_automatically():
    """DOWNLOADS_SEGMENT_AUTOMATICALLY: split every finished video into shots (CV) on its own."""
    return _setting("DOWNLOADS_SEGMENT_AUTOMATICALLY", True, env.get_bool)


# --- Storage housekeeping ------------------------------------------------------

BYTE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
BYTE_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?$")


def parse_bytes(name, raw):
    """A size in bytes from `raw`: a whole number, or a number with K, M, G or T (powers of
    1024, e.g. "10G" or "1.5TiB"). Raises SettingsError naming `name` for anything else."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    match = BYTE_AMOUNT.match(str(raw).strip().upper())
    if not match:
        raise env.SettingsError(
            f"{name} must be a number of bytes, optionally with K, M, G or T (e.g. 10G), "
            f"not {raw!r}.")
    number, unit = match.groups()
    return int(float(number) * BYTE_UNITS[unit])


MIN_MEMORY_BYTES = 256 * 1024**2  # less cannot start a download's Python child


def memory_bytes(name, default):
    """A process's memory limit in bytes from setting `name` (e.g. "2G"); None for 0 (no cap)."""
    raw = _setting(name, default, env.get_str)
    value = parse_bytes(name, raw) if raw not in ("", None) else default
    if 0 < value < MIN_MEMORY_BYTES:
        raise env.SettingsError(f"{name} must be 0 (no cap) or at least 256M, not {raw!r}.")
    return value or None


def media_max_bytes():
    """MEDIA_MAX_BYTES: the most bytes of finished files MEDIA_ROOT may hold before housekeeping
    evicts the least recently used ones (e.g. 500G); unset or 0 means no cap."""
    raw = _setting("MEDIA_MAX_BYTES", "", env.get_str)
    return parse_bytes("MEDIA_MAX_BYTES", raw) if raw not in ("", None) else 0


def housekeeping_batch():
    """DOWNLOADS_HOUSEKEEPING_BATCH: assets one housekeeping query looks at at once."""
    return _count("DOWNLOADS_HOUSEKEEPING_BATCH", 100)


def housekeeping_max_assets():
    """DOWNLOADS_HOUSEKEEPING_MAX_ASSETS: most assets one housekeeping run looks at; the next
    run starts over from the least recently used."""
    return _count("DOWNLOADS_HOUSEKEEPING_MAX_ASSETS", 2000)


def housekeeping_timeout_s():
    """DOWNLOADS_HOUSEKEEPING_TIMEOUT_S: the longest one housekeeping run may take; it stops
    between two assets then. Read when the kinds are registered."""
    return _setting("DOWNLOADS_HOUSEKEEPING_TIMEOUT_S", 1800.0,
                    lambda name, default: env.get_number(name, default, minimum=1))
