"""Hostile input, as Hypothesis strategies: what an attacker or a careless script sends.

Each strategy mixes plain values (so requests also get past the first check
and reach deeper code) with the shapes that broke the site before: deep
nesting, numbers past every column and past Python's integer-string limit,
NaN and infinity, lone surrogates, NUL, non-UTF-8 bytes, non-ASCII digits,
and values of the wrong type in every field.
"""

import json
from urllib.parse import quote

from hypothesis import strategies as st

NASTY_TEXT = [
    "", " ", "0", "-1", "1e308", "1e300", "-1e308", "NaN", "nan", "inf", "-Infinity", "9" * 25,
    "9" * 5000, "²", "٣", "①②⑦", "\u00b9\u00b2", "\x00", "\ud800", "\udfff", "..", "../..",
    "%2e%2e", "%ff%fe", "%c0%af", "null", "true", "[]", "{}", "[\"x\"]", "' OR 1=1 --",
    "<script>", "http://127.0.0.1/", "gopher://127.0.0.1:70/", "file:///etc/passwd",
    "http://7147006462/", "http://425.510.425.510/", "http://0x41414141A9FEA9FE/",
    "http://①②⑦.⓪.⓪.①/", "https://videos.example.com/clip.mp4", "https://x.example/%ff",
    "default", "downloads", "insights", "library", "video_summary", "shot_notes",
    "library_overview", "interactive", "prefetch",
    "best", "audio", "720p", "trim", "pause", "cancel", "x" * 300,
]

texts = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=40),
                  st.text(st.characters(codec="utf-8"), max_size=12))
huge_numbers = st.sampled_from([10**25 - 1, -(10**25), 2**63, 2**31, -(2**63) - 1, 1e308, -1e308,
                                5e-324, 10**4000])
scalars = st.one_of(st.none(), st.booleans(), st.integers(), huge_numbers,
                    st.floats(allow_nan=False, allow_infinity=False), texts)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)), max_leaves=12)

FIELDS = ["url", "format", "name", "kind", "subject", "priority", "op", "start_s", "end_s",
          "interval_s", "reason", "next", "page", "q", "queue", "action", "_selected_action",
          "concurrency", "gap_seconds", "limit", "max_concurrent", "max_queued",
          "storage_bytes", "paused", "unlimited", "post", "index"]


def _raw_json(value):
    """JSON text, allowing what json.dumps writes for NaN and inf (Python's parser reads it)."""
    try:
        return json.dumps(value, ensure_ascii=True)
    except (ValueError, TypeError):
        return "null"


@st.composite
def json_bodies(draw, fields=FIELDS):
    """Bytes for a JSON request body: an object of the API's fields with any values, or worse."""
    shape = draw(st.sampled_from(["object", "object", "object", "nested", "constant", "bytes",
                                  "value", "surrogate"]))
    if shape == "object":
        names = draw(st.lists(st.sampled_from(fields), max_size=4, unique=True))
        obj = {name: draw(json_values) for name in names}
        return _raw_json(obj).encode()
    if shape == "nested":
        depth = draw(st.sampled_from([40, 1000, 100_000]))
        opener = draw(st.sampled_from(["[", '{"url":']))
        return (opener * depth).encode()
    if shape == "constant":
        name = draw(st.sampled_from(fields))
        constant = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000]))
        return f'{{"{name}": {constant}}}'.encode()
    if shape == "surrogate":
        name = draw(st.sampled_from(fields))
        return f'{{"{name}": "\\ud800", "url": "https://x.example/\\udfff"}}'.encode()
    if shape == "bytes":
        return draw(st.sampled_from([b"\xff\xfe{", b'{"url": "\xff"}', b"\x00", b"", b"{"]))
    return _raw_json(draw(json_values)).encode()


@st.composite
def form_data(draw, fields):
    """Form fields (a dict for the test client): the given names, each with hostile values."""
    names = draw(st.lists(st.sampled_from(sorted(fields)), max_size=8, unique=True)) if fields else []
    data = {}
    for name in names:
        value = draw(st.one_of(texts, st.integers().map(str), huge_numbers.map(str)))
        data[name] = value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return data


@st.composite
def query_strings(draw):
    pairs = draw(st.lists(st.tuples(st.sampled_from(FIELDS + ["o", "p", "e", "status__exact",
                                                              "all", "_to_field"]), texts),
                          max_size=3))
    parts = [f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'))}" for k, v in pairs]
    parts += draw(st.lists(st.sampled_from(["%ff", "a=%ff%fe", "page=%c0%af", "q=%00"]),
                           max_size=1))
    return "&".join(parts)


def _header_text(value):
    # WSGI headers are latin-1; what a client cannot send, no server receives.
    return value.encode("utf-8", "surrogatepass").decode("latin-1")


headers = st.fixed_dictionaries({}, optional={
    "HTTP_RANGE": st.one_of(st.sampled_from(["bytes=0-", "bytes=-1", "bytes=" + "9" * 5000 + "-",
                                             "bytes=-" + "9" * 5000, "bytes=²-", "bytes=5-1",
                                             "bytes=0-1,2-3"]), texts.map(_header_text)),
    "HTTP_IF_RANGE": texts.map(_header_text),
    "HTTP_HX_REQUEST": st.sampled_from(["true", "false", "\x7f"]),
    "HTTP_ACCEPT_LANGUAGE": st.sampled_from(["zh-hans", "en", "*", "x" * 300, "zh-Hans;q=NaN"]),
    "HTTP_AUTHORIZATION": st.sampled_from(["Bearer ", "Bearer nope", "Basic eA==",
                                           "bearer hlg_" + "x" * 43]),
})
