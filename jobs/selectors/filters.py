"""Finding jobs by what staff know of them: owner, kind, queue, state, error code, when they
were queued, unique key, a payload field.

The admin's job list and `manage.py jobs` read their filters through this
one parser and apply these same conditions, so "all N matching" in the
admin and `jobs retry --kind ...` select the same rows. A value that cannot
be read is a FilterError saying how to write it; callers show it instead
of guessing (an unread filter must never widen a bulk action to every job).

The payload filter (`path=value`) names object keys, on both databases:
`items.0=x` is the key "0" inside `items`, never the first element of a
list. PostgreSQL is asked for JSON containment (`payload @> '{"path":
value}'`), which the GIN index of migration 0011 answers; SQLite compares the
JSON_TYPE and JSON_EXTRACT of a path whose keys are all quoted (Django's key
lookups would read "0" as an array index there, and nest one expression per
key, which recursion limits a few hundred keys deep).
"""

import json
import math
import re
from dataclasses import dataclass, fields
from datetime import datetime, time, timedelta

from django.db import connection
from django.db.models import CharField, Func, Q, Value
from django.db.models.lookups import Exact, In
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext as _

from jobs import conf
from jobs.models import JobStatus

MAX_TEXT = 255  # no field filtered on is longer
MAX_AGE = timedelta(days=36500)  # older than any job, and far from the calendar's end
PAYLOAD_PATH = re.compile(r"[^.=\s][^.=]*(\.[^.=\s][^.=]*)*")
MAX_PAYLOAD_KEYS = 16  # deeper than payloads are shaped; each key is one more level to compare
# JSON_TYPE's answer for each kind of value the filter compares.
SQLITE_TYPES = {str: ["text"], int: ["integer", "real"], float: ["integer", "real"]}


class FilterError(ValueError):
    """A filter value that cannot be read; the message says how to write it."""


@dataclass(frozen=True)
class JobFilter:
    owner: str = ""  # the owner's user name, any case
    kind: str = ""
    queue: str = ""
    statuses: tuple = ()  # JobStatus values
    error_code: str = ""
    since: datetime | None = None  # queued at or after
    until: datetime | None = None  # queued before
    unique_key: str = ""
    payload: tuple = ()  # (path as a tuple of keys, [values it may equal])
    older_than: timedelta | None = None  # queued longer ago than this

    @classmethod
    def parse(cls, *, owner="", kind="", queue="", status="", error_code="", since="", until="",
              unique_key="", payload="", older_than=""):
        """A JobFilter from text as people type it; FilterError names the first value it cannot read.

        `since` and `until` are dates (YYYY-MM-DD, both days included) or
        date-times, in the site's time zone; `status` is one state or several
        separated by commas; `older_than` an age like 90m, 12h, 30d.
        """
        texts = {"owner": owner, "kind": kind, "queue": queue, "error_code": error_code,
                 "unique_key": unique_key}
        for name, value in texts.items():
            if len(str(value)) > MAX_TEXT:
                raise FilterError(_("The %(field)s filter is longer than %(n)d characters.")
                                  % {"field": name.replace("_", " "), "n": MAX_TEXT})
        return cls(
            **{name: str(value).strip() for name, value in texts.items()},
            statuses=_statuses(status),
            since=_moment(since, end=False),
            until=_moment(until, end=True),
            payload=parse_payload(payload) if str(payload).strip() else (),
            older_than=_age(older_than),
        )

    def __bool__(self):
        return any(getattr(self, f.name) for f in fields(self))

    def apply(self, queryset):
        """`queryset` narrowed to the jobs this filter matches."""
        if self.owner:
            queryset = queryset.filter(owner__username__iexact=self.owner)
        for name in ("kind", "queue", "error_code", "unique_key"):
            if getattr(self, name):
                queryset = queryset.filter(**{name: getattr(self, name)})
        if self.statuses:
            queryset = queryset.filter(status__in=self.statuses)
        if self.since:
            queryset = queryset.filter(enqueued_at__gte=self.since)
        if self.until:
            queryset = queryset.filter(enqueued_at__lt=self.until)
        if self.older_than is not None:
            queryset = queryset.filter(enqueued_at__lt=timezone.now() - self.older_than)
        if self.payload:
            queryset = queryset.filter(payload_condition(*self.payload))
        return queryset

    def describe(self):
        """[(name, value)] of the conditions set, as a person would write them again."""
        words = []
        for name in ("owner", "kind", "queue", "error_code", "unique_key"):
            if getattr(self, name):
                words.append((name, getattr(self, name)))
        if self.statuses:
            words.append(("status", ",".join(self.statuses)))
        if self.since:
            words.append(("since", timezone.localtime(self.since).isoformat(timespec="minutes")))
        if self.until:
            words.append(("until", timezone.localtime(self.until).isoformat(timespec="minutes")))
        if self.older_than is not None:
            words.append(("older_than", f"{int(self.older_than.total_seconds())}s"))
        if self.payload:
            path, values = self.payload
            words.append(("payload", f"{'.'.join(path)}={values[0]}"))
        return words


def parse_payload(text):
    """`path=value` as (keys, values): `a.b=7` is the key b inside a, equal to 7 or to "7".

    Every key is an object's key, "0" too, and a path names at most
    MAX_PAYLOAD_KEYS of them. The value is compared as text, and also as the
    JSON number, true, false or null it spells; quote it ("7") to compare as
    text only.
    """
    text = str(text).strip()
    path, equals, raw = text.partition("=")
    path = path.strip()
    if not equals or not path or len(text) > 1000 or not PAYLOAD_PATH.fullmatch(path):
        raise FilterError(_("Write the payload filter as key=value, e.g. url=https://example.com "
                            "or video.id=42 for a key inside another."))
    keys = tuple(key.strip() for key in path.split("."))
    if len(keys) > MAX_PAYLOAD_KEYS:
        raise FilterError(_("The payload filter names at most %(n)d keys, one inside another "
                            "(this one names %(given)d).")
                          % {"n": MAX_PAYLOAD_KEYS, "given": len(keys)})
    if any('"' in key for key in keys):
        # SQLite's JSON paths have no way to write one.
        raise FilterError(_('A key of the payload filter cannot hold a double quote (").'))
    raw = raw.strip()
    try:
        parsed = json.loads(raw)
    except ValueError:
        values = [raw]
    else:
        if isinstance(parsed, (dict, list)):
            raise FilterError(_("The payload filter compares one value (text, a number, true, "
                                "false or null), not a list or an object."))
        if isinstance(parsed, float) and not math.isfinite(parsed):
            values = [raw]  # NaN and Infinity are no JSON a payload can hold
        elif isinstance(parsed, str):
            values = [parsed]
        else:
            values = [raw, parsed]
    return keys, values


def payload_condition(path, values):
    """A Q for jobs whose payload holds one of `values` at `path`, a tuple of object keys."""
    condition = Q()
    for value in values:
        if connection.vendor == "postgresql":
            nested = value
            for key in reversed(path):
                nested = {key: nested}
            condition |= Q(payload__contains=nested)  # @>, through the GIN index
        else:
            condition |= _sqlite_condition(path, value)
    return condition


def _sqlite_condition(path, value):
    """The value at `path` is `value`, of the same JSON type: SQLite's JSON_EXTRACT alone
    reads true as 1."""
    # Each key quoted, as the canonical payload text writes it ("\u00e9" for é): "0" is a key.
    at = Value("$" + "".join(f".{json.dumps(key)}" for key in path))
    found_type = Func("payload", at, function="JSON_TYPE", output_field=CharField())
    if value is None or isinstance(value, bool):
        return Q(Exact(found_type, json.dumps(value)))  # 'null', 'true' or 'false'
    found = Func("payload", at, function="JSON_EXTRACT", output_field=CharField())
    # The value read by SQLite's own JSON parser, as the payload's was (a number of any size).
    wanted = Func(Value(json.dumps(value)), Value("$"), function="JSON_EXTRACT",
                  output_field=CharField())
    return Q(In(found_type, SQLITE_TYPES[type(value)])) & Q(Exact(found, wanted))


def _statuses(text):
    words = [w.strip().upper() for w in str(text or "").split(",") if w.strip()]
    by_label = {str(label).upper(): value for value, label in JobStatus.choices}
    found = []
    for word in words:
        value = word if word in JobStatus.values else by_label.get(word)
        if value is None:
            raise FilterError(_("%(value)r is not a state; use one of %(states)s.")
                              % {"value": word.lower(),
                                 "states": ", ".join(s.lower() for s in JobStatus.values)})
        found.append(value)
    return tuple(found)


def _moment(text, *, end):
    """A date or date-time as an aware datetime; a date `end`s after its day (so it is included)."""
    text = str(text or "").strip()
    if not text:
        return None
    try:
        # A bare date first: parse_datetime reads one too (as its midnight), which would
        # leave the last day of a range out.
        day = parse_date(text)
        if day is not None:
            moment = datetime.combine(day + timedelta(days=1) if end else day, time.min)
        else:
            moment = parse_datetime(text)
        if moment is not None and timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
    except (ValueError, OverflowError):  # 2024-02-30, the last day of year 9999, a DST gap
        moment = None
    if moment is None:
        raise FilterError(_("%(value)r is not a date; write YYYY-MM-DD, or YYYY-MM-DD HH:MM.")
                          % {"value": text[:40]})
    return moment


def _age(text):
    text = str(text or "").strip()
    if not text:
        return None
    try:
        age = conf.parse_age(text)
    except ValueError as exc:
        raise FilterError(str(exc)) from None
    except OverflowError:
        age = None
    if age is None or age > MAX_AGE:
        raise FilterError(_("%(value)r is longer ago than any job; write at most 100 years.")
                          % {"value": text[:40]})
    return age
