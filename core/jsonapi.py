"""What the JSON API accepts from a request, and the error document it answers with.

Every refusal under /api/ is `{"error": sentence, "error_code": code}`, with
the details a script needs beside them (a `field`, the form's `errors`). A
body is read once, here, under one set of rules: strict UTF-8, one JSON
object, no NaN or infinity, no lone surrogates or NUL characters (PostgreSQL
stores neither), nested at most MAX_DEPTH levels.
"""

import json

from django.http import JsonResponse
from django.http.request import RawPostDataException
from django.utils.translation import gettext as _

MAX_DEPTH = 32  # no request the API knows nests deeper than a few levels
ID_DIGITS = 18  # a numeric id in a URL or a body has at most this many digits (a bigint)


class BadRequest(Exception):
    """A request the API refuses with 400; `message` is the sentence for the script's user."""

    def __init__(self, message, *, code="invalid", field=None):
        super().__init__(message)
        self.message, self.code, self.field = message, code, field

    def response(self):
        extra = {"field": self.field} if self.field else {}
        return error(400, self.code, self.message, **extra)


def error(http_status, code, message, **extra):
    # `http_status`, not `status`: a download's refusal carries its own "status" field.
    return JsonResponse({"error": str(message), "error_code": code, **extra}, status=http_status)


def json_object(request):
    """The request's body as a dict, or BadRequest("bad_json") saying what is wrong with it."""
    try:
        data = json.loads(request.body.decode("utf-8") or "null", parse_constant=_no_constant)
    # UnicodeDecodeError and JSONDecodeError are ValueErrors; RawPostDataException is a
    # multipart body already read as a form (by the CSRF check), so it was no JSON either.
    except (ValueError, RecursionError, RawPostDataException):
        raise BadRequest(_("Send a JSON object."), code="bad_json") from None
    if not isinstance(data, dict):
        raise BadRequest(_("Send a JSON object."), code="bad_json")
    _check(data)
    return data


def _no_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


def _check(data):
    # A stack, not recursion: the depth is what is being checked.
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise BadRequest(_("The JSON is nested deeper than %(depth)d levels.")
                                 % {"depth": MAX_DEPTH}, code="bad_json")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key)
                stack.append((item, depth + 1))


def _check_text(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(_("The JSON holds a lone surrogate (\\ud800 to \\udfff), which is not "
                           "text."), code="bad_json") from None
    if "\x00" in text:
        raise BadRequest(_("The JSON holds a NUL character."), code="bad_json")


def text(data, name, *, default=""):
    """The string under `name` (`default` when it is absent, null or empty)."""
    value = data.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise BadRequest(_("“%(field)s” must be a string.") % {"field": name}, field=name)
    return value


def number_id(value):
    """The int a numeric id spells in ASCII digits, or None (for "²", "٣", 10**30, "-1")."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= ID_DIGITS:
        return int(value)
    return None
