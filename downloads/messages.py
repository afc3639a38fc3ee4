"""What a user reads for each error code a download can end with.

Jobs store the technical detail (for staff); pages and the API show these
sentences, translated into the reader's language when they are rendered.
"""

from django.utils.translation import gettext_lazy as _

from downloads import errors

STAFF_CANCEL = "cancelled_by_staff"  # not an engine code: a cancel by someone not the owner

ERROR_MESSAGES = {
    # The download itself (downloads.errors).
    errors.NetworkFailed.code: errors.NetworkFailed.message,
    errors.Unavailable.code: errors.Unavailable.message,
    errors.UnsupportedURL.code: errors.UnsupportedURL.message,
    errors.TooLarge.code: errors.TooLarge.message,
    errors.QuotaExceeded.code: errors.QuotaExceeded.message,
    errors.BlockedDestination.code: errors.BlockedDestination.message,
    errors.PostprocessFailed.code: errors.PostprocessFailed.message,
    errors.StorageFull.code: errors.StorageFull.message,
    # The engine and its supervisor.
    "cancelled": _("This download was cancelled."),
    STAFF_CANCEL: _("Cancelled by staff."),
    "superseded": _("This download was replaced by a newer request."),
    "stalled": _("The download stopped receiving data and was stopped. Try again later."),
    "timeout": _("The download took longer than it is allowed to and was stopped."),
    "crashed": _("The download stopped unexpectedly. Try again."),
    "lease_expired": _("The worker running this download stopped; it will be tried again."),
    "spawn_failed": _("The download could not be started. Try again later."),
    "unknown_kind": _("No worker can run this download right now."),
    "asset_busy": _("The same video was being downloaded elsewhere; trying again shortly."),
    "edit_failed": _("The edit could not be made from this file."),
}


def error_message(code, detail=""):
    """The sentence for `code`; the stored detail (or a generic sentence) for unknown codes."""
    if code == STAFF_CANCEL and detail:
        return _("Cancelled by staff: %(reason)s") % {"reason": detail}
    if code in ERROR_MESSAGES:
        return ERROR_MESSAGES[code]
    return detail or _("The download failed.")
