import pytest
from django.test import RequestFactory

from core import jsonapi


def body(raw):
    return RequestFactory().post("/api/x/", raw, content_type="application/json")


@pytest.mark.parametrize("raw", [
    b"[" * 100_000, b'{"url":' * 100_000, b'{"a":' * 40 + b"1" + b"}" * 40,
    b'{"url": "\\ud800"}', b'{"\\udfff": 1}', b'{"name": "a\\u0000b"}',
    b'{"start_s": NaN}', b'{"x": Infinity}', b'{"x": -Infinity}', b'{"x": ' + b"9" * 5000 + b"}",
    b"\xff\xfe{}", b'{"url": "\xff"}', b"", b"[]", b'"x"', b"null", b"{",
])
def test_a_body_that_is_not_one_sane_json_object_is_bad_json(raw):
    with pytest.raises(jsonapi.BadRequest) as caught:
        jsonapi.json_object(body(raw))
    assert caught.value.code == "bad_json"
    response = caught.value.response()
    assert response.status_code == 400


def test_a_sane_object_is_read_as_it_is():
    assert jsonapi.json_object(body(b'{"url": "https://x.example/\\u00e9", "n": [1, {"a": 2.5}]}')) \
        == {"url": "https://x.example/é", "n": [1, {"a": 2.5}]}


@pytest.mark.parametrize("value", [["x"], {"a": 1}, 7, 1.5, True])
def test_a_text_field_of_another_type_is_refused_naming_the_field(value):
    with pytest.raises(jsonapi.BadRequest) as caught:
        jsonapi.text({"name": value}, "name")
    assert caught.value.field == "name" and caught.value.code == "invalid"


def test_an_absent_or_empty_text_field_is_the_default():
    assert jsonapi.text({}, "format", default="best") == "best"
    assert jsonapi.text({"format": None}, "format", default="best") == "best"
    assert jsonapi.text({"format": ""}, "format", default="best") == "best"
    assert jsonapi.text({"format": "audio"}, "format", default="best") == "audio"


@pytest.mark.parametrize(("value", "expected"), [
    ("42", 42), (42, 42), ("0", 0), ("9" * 18, int("9" * 18)),
    ("²", None), ("٣", None), ("①", None), ("9" * 19, None), ("9" * 5000, None), ("-1", None),
    (-1, None), ("", None), (True, None), (None, None), ([1], None), ("4 2", None),
])
def test_a_numeric_id_is_ascii_digits_that_fit_a_bigint(value, expected):
    assert jsonapi.number_id(value) == expected
