"""Payload validation: JSON only, checked before anything is written."""

import json
import math

from django.utils.translation import gettext as _

from jobs import conf
from jobs.exceptions import InvalidPayload

# Made once: json.dumps() with any option builds a new encoder for every call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def validate(payload, *, max_depth=None, max_bytes=None):
    """Return the payload's canonical JSON text, or raise InvalidPayload saying why.

    Bulk callers pass the limits in, read once for the whole batch.
    """
    max_depth = conf.JOBS_MAX_PAYLOAD_DEPTH if max_depth is None else max_depth
    _walk(payload, depth=0, max_depth=max_depth)
    try:
        text = _ENCODER.encode(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(_("The payload is not JSON: %(error)s") % {"error": exc}) from None
    limit = conf.JOBS_MAX_PAYLOAD_BYTES if max_bytes is None else max_bytes
    if len(text) > limit and len(text.encode()) > limit:
        raise InvalidPayload(_("The payload is larger than %(limit)d bytes.") % {"limit": limit})
    return text


def _walk(value, *, depth, max_depth):
    # Checked by hand because json.dumps accepts NUL (which PostgreSQL's jsonb
    # rejects only at write time) and recurses until Python's stack runs out.
    if depth > max_depth:
        raise InvalidPayload(_("The payload is nested deeper than %(depth)d levels.") % {"depth": max_depth})
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidPayload(_("The payload contains a NUL character."))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidPayload(_("The payload contains NaN or infinity."))
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidPayload(_("Payload keys must be strings."))
            if "\x00" in key:
                raise InvalidPayload(_("The payload contains a NUL character."))
            _walk(item, depth=depth + 1, max_depth=max_depth)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _walk(item, depth=depth + 1, max_depth=max_depth)
    elif value is not None and not isinstance(value, (bool, int)):
        raise InvalidPayload(
            _("The payload is not JSON: %(type)s values cannot be stored.") % {"type": type(value).__name__}
        )
