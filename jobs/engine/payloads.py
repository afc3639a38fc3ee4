"""Payload validation: JSON only, checked before anything is written."""

import json
import math

from django.utils.translation import gettext as _

from jobs import conf
from jobs.exceptions import InvalidPayload

# Made once: json.dumps() with any option builds a new encoder for every call. No
# check for cycles: a cycle nests past the depth limit, and the walk says so.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), check_circular=False)


def _c_part(encoder):
    """The C encoder that JSONEncoder.encode() builds anew at each call, built once: the
    same text in a third of the time (docs/performance.md, twelfth round). None where
    this Python has no C part or builds it otherwise."""
    make = getattr(json.encoder, "c_make_encoder", None)
    try:
        return make(None, encoder.default, json.encoder.encode_basestring_ascii, None,
                    encoder.key_separator, encoder.item_separator, encoder.sort_keys,
                    encoder.skipkeys, encoder.allow_nan)
    except TypeError:  # None, or another signature
        return None


_C_ENCODE = _c_part(_ENCODER)


def _encode(payload):
    """The payload's canonical JSON text (as _ENCODER.encode() writes it)."""
    if _C_ENCODE is None:
        return _ENCODER.encode(payload)
    return "".join(_C_ENCODE(payload, 0))


def validate(payload, *, max_depth=None, max_bytes=None):
    """Return the payload's canonical JSON text, or raise InvalidPayload saying why.

    Bulk callers pass the limits in, read once for the whole batch. JSON's
    encoder (in C) looks at every value; what it lets through that PostgreSQL
    or the engine would not (NUL, keys that are not text, nesting past the
    limit) is checked after it, on the text and on the containers alone. A
    payload that fails there is walked value by value for the reason.
    """
    max_depth = conf.JOBS_MAX_PAYLOAD_DEPTH if max_depth is None else max_depth
    try:
        text = _encode(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        _walk(payload, depth=0, max_depth=max_depth)
        raise InvalidPayload(_("The payload is not JSON: %(error)s") % {"error": exc}) from None
    # The encoder writes NUL as \u0000; text without that holds none. (A match may be
    # a backslash of the payload's own, which the walk tells apart.)
    if "\\u0000" in text or not _containers_pass(payload, max_depth):
        _walk(payload, depth=0, max_depth=max_depth)
    limit = conf.JOBS_MAX_PAYLOAD_BYTES if max_bytes is None else max_bytes
    if len(text) > limit:  # ASCII: the encoder escapes every other character, so one a byte
        raise InvalidPayload(_("The payload is larger than %(limit)d bytes.") % {"limit": limit})
    return text


def _containers_pass(payload, max_depth):
    """Whether every key is text and nothing lies deeper than `max_depth` (the encoder
    writes a number's key as text, and nests as deep as Python's stack lets it)."""
    if not isinstance(payload, (dict, list, tuple)):
        return True
    stack = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if value and depth >= max_depth:  # its items lie deeper than allowed
            return False
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    return False
            value = value.values()
        for item in value:
            if isinstance(item, (dict, list, tuple)):
                stack.append((item, depth + 1))
    return True


def _walk(value, *, depth, max_depth):
    # The reason a payload is refused, value by value: json.dumps accepts NUL (which
    # PostgreSQL's jsonb rejects only at write time) and recurses until Python's stack
    # runs out.
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
