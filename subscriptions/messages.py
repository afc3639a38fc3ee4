"""What a user reads for each error code a check can end with (the stored detail is for staff)."""

from django.utils.translation import gettext_lazy as _

from downloads import errors

ERROR_MESSAGES = {
    errors.BlockedDestination.code: _(
        "The address, or one it led to, is on a private or local network, so it was not read."),
    errors.UnsupportedURL.code: _(
        "This address is not a playlist, channel or video that can be read."),
    errors.Unavailable.code: _(
        "The playlist or channel is not available (removed, private or restricted)."),
    errors.NetworkFailed.code: _(
        "The site could not be reached or the connection broke."),
    "stalled": _("The site stopped answering and the check was stopped."),
    "timeout": _("The check took longer than it is allowed to and was stopped."),
}
GENERIC = _("The check stopped unexpectedly.")


def error_message(code):
    return ERROR_MESSAGES.get(code, GENERIC)
