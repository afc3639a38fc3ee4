"""Download settings: each read from Django settings when defined there, else the environment.

Functions rather than constants so that a test (or an operator editing the
environment of a child process) sees the value in force at the call.
"""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from project import env


def _setting(name, default, read):
    try:
        return getattr(settings, name)
    except AttributeError:
        pass
    except ImproperlyConfigured:
        pass  # a bare child process without Django settings reads the environment alone
    return read(name, default)


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
    return _setting("DOWNLOADS_PLAYLIST_LIMIT", 50,
                    lambda name, default: env.get_number(name, default, kind=int, minimum=1))


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
