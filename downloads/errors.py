"""Why a download failed: one class per cause, each with the `code` pages and the API show.

`message` is the sentence a user reads (translated lazily); `detail` is the
technical reason for logs and staff.
"""

from django.utils.translation import gettext_lazy as _


class DownloadFailed(Exception):
    """A download could not finish; `code` names the cause."""

    code = "unknown"
    message = _("The download failed.")

    def __init__(self, detail="", *, message=None):
        super().__init__(detail)
        self.detail = detail
        if message is not None:
            self.message = message

    def __str__(self):
        return self.detail or str(self.message)


class NetworkFailed(DownloadFailed):
    """The server could not be reached, or the connection broke or timed out."""

    code = "network"
    message = _("The server could not be reached or the connection broke. Try again later.")


class Unavailable(DownloadFailed):
    """The page exists but offers nothing to download (removed, private, restricted, live)."""

    code = "unavailable"
    message = _("This video is not available for download (removed, private, restricted or live).")


class UnsupportedURL(DownloadFailed):
    """The address is not something Haulage downloads (not http(s), a playlist not asked for...)."""

    code = "unsupported_url"
    message = _("This address cannot be downloaded.")


class TooLarge(DownloadFailed):
    """The file is, or grew, larger than the byte limit the caller set."""

    code = "too_large"
    message = _("The file is larger than the size limit.")

    def __init__(self, detail="", *, size_bytes=None, limit_bytes=None, message=None):
        super().__init__(detail, message=message)
        self.size_bytes = size_bytes  # None when the size was never announced
        self.limit_bytes = limit_bytes


class QuotaExceeded(TooLarge):
    """The file does not fit in what is left of its owner's storage quota."""

    code = "quota"
    message = _("The file does not fit in your remaining storage.")


class BlockedDestination(DownloadFailed):
    """A connection of the download (the URL, a redirect, a segment) went to a private address."""

    code = "blocked_destination"
    message = _("The download tried to reach an address that is not allowed.")

    def __init__(self, detail="", *, destination="", message=None):
        super().__init__(detail, message=message)
        self.destination = destination


class PostprocessFailed(DownloadFailed):
    """ffmpeg could not process the downloaded file."""

    code = "postprocess"
    message = _("The downloaded file could not be processed.")


class NotMedia(PostprocessFailed):
    """The downloaded file is not an audio or video container (a playlist, a web page...)."""

    message = _("The downloaded file is not a video or audio file.")


class StorageFull(DownloadFailed):
    """The disk holding the staging folder is full; an operator must free space."""

    code = "storage_full"
    message = _("The server ran out of disk space. Try again later.")


class Cancelled(DownloadFailed):
    """The caller asked the download to stop (pause or cancel); its partial file is kept."""

    code = "cancelled"
    message = _("The download was stopped.")


# Causes that are the address itself: another attempt would meet the same refusal.
FINAL_CODES = frozenset({UnsupportedURL.code, BlockedDestination.code})


def retry_helps(code):
    """Whether trying a download that ended with `code` again could end otherwise."""
    return code not in FINAL_CODES
