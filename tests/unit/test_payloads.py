"""A payload's check: the text JSON's own encoder writes, and a clear refusal of what
PostgreSQL or the engine would not take, wherever in the payload it sits."""

import enum
import json

import pytest

from jobs.engine import payloads
from jobs.exceptions import InvalidPayload


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


ACCEPTED = [
    {"task": "app.tasks.noop", "takes_context": False, "args": [1, "x", None], "kwargs": {}},
    {"text": "zoë ✓ 日本 \U0001f3ac", "quote": 'say "hi"\n\t\\'},
    {"floats": [0.1, -0.0, 1e308, 5e-324, 3.0], "ints": [10**30, -(10**30), 0]},
    {"nested": {"a": [{"b": [[], {}, [True, False]]}]}},
    {"tuple": (1, (2, 3)), "enum": Colour.RED, Name("key"): Name("value")},
    {"backslash u, written out": "\\u0000"},
    [1, {"a": "b"}],
    "just text",
    None,
]


@pytest.mark.parametrize("payload", ACCEPTED)
@pytest.mark.parametrize("c_part", [True, False], ids=["c-encoder", "python-encoder"])
def test_the_text_is_what_jsons_own_encoder_writes(payload, c_part, monkeypatch):
    if not c_part:
        monkeypatch.setattr(payloads, "_C_ENCODE", None)
    assert payloads.validate(payload) == json.dumps(payload, allow_nan=False, separators=(",", ":"))


def _cycle():
    looped = {"a": []}
    looped["a"].append(looped)
    return looped


def _nested(levels, make=lambda inner: [inner]):
    value = 1
    for _ in range(levels):
        value = make(value)
    return value


REFUSED = [
    ({"a": [{"b": "x\x00y"}]}, "NUL"),
    ({"a": [{"b\x00": 1}]}, "NUL"),
    ({"a": [1.5, float("nan")]}, "NaN or infinity"),
    ({"a": {"b": -float("inf")}}, "NaN or infinity"),
    ({"a": [{"1": 1, 2: 3}]}, "keys must be strings"),
    ({"a": {True: 1}}, "keys must be strings"),
    ({"a": {None: 1}}, "keys must be strings"),
    ({"a": {1.5: 1}}, "keys must be strings"),
    ({"a": {(1, 2): 1}}, "keys must be strings"),
    ({"a": [{1, 2}]}, "set values cannot be stored"),
    ({"a": b"bytes"}, "bytes values cannot be stored"),
    ({"a": object()}, "object values cannot be stored"),
    (_cycle(), "nested deeper"),
    ({"a": _nested(100_000)}, "nested deeper"),  # past Python's stack
]


@pytest.mark.parametrize("payload,reason", REFUSED)
@pytest.mark.parametrize("c_part", [True, False], ids=["c-encoder", "python-encoder"])
def test_what_cannot_be_stored_is_refused_with_its_reason(payload, reason, c_part, monkeypatch):
    if not c_part:
        monkeypatch.setattr(payloads, "_C_ENCODE", None)
    with pytest.raises(InvalidPayload, match=reason):
        payloads.validate(payload)


@pytest.mark.parametrize("make", [lambda inner: [inner], lambda inner: {"k": inner}],
                         ids=["lists", "objects"])
def test_values_may_lie_as_deep_as_the_limit_and_no_deeper(make):
    assert payloads.validate(_nested(4, make), max_depth=4)
    with pytest.raises(InvalidPayload, match="nested deeper than 4 levels"):
        payloads.validate(_nested(5, make), max_depth=4)
    # An empty container at the limit holds nothing deeper.
    assert payloads.validate(_nested(4, lambda inner: make([]) if inner == 1 else make(inner)),
                             max_depth=4)


def test_a_payload_past_the_size_limit_is_refused():
    assert payloads.validate({"a": "x" * 90}, max_bytes=100)
    with pytest.raises(InvalidPayload, match="larger than 100 bytes"):
        payloads.validate({"a": "x" * 100}, max_bytes=100)
