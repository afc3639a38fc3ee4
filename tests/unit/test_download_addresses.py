import pytest
from django.test import override_settings
from django.utils.functional import Promise

from downloads.addresses import InvalidURL, normalise_url, validate_url
from downloads.egress import EgressPolicy

PUBLIC_ONLY = EgressPolicy()


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("file:///etc/passwd", "scheme"),
        ("FILE:///etc/passwd", "scheme"),
        ("ftp://example.com/video.mp4", "scheme"),
        ("data:text/html,<script>alert(1)</script>", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("example.com/video.mp4", "scheme"),
        ("--exec=touch%20/tmp/pwned", "option"),
        ("-o/tmp/anywhere", "option"),
        ("--load-info-json=/etc/passwd", "option"),
        ("ytsearch:cats", "search"),
        ("ytsearch5:cats", "search"),
        ("YTSEARCH10:cats", "search"),
        ("ytsearchdate:cats", "search"),
        ("ytsearchall:cats", "search"),
        ("scsearch:song", "search"),
        ("http://user:secret@example.com/v.mp4", "credentials"),
        ("http://user@example.com/v.mp4", "credentials"),
        ("http://@example.com/v.mp4", "credentials"),
        ("https://example.com/" + "a" * 2100, "too_long"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com/a b", "whitespace"),
        ("http://example.com/\x00", "whitespace"),
        ("http://example.com/a\tb", "whitespace"),
        ("http://example.com/\nHost: evil", "whitespace"),
        ("http://example.com/\u202egnp.exe", "whitespace"),
        ("http://example.com/a\u00a0b", "whitespace"),
        ("http:///just/a/path", "host"),
        ("http://", "host"),
        ("https:example.com", "host"),
        ("http://ex%61mple.com/", "host"),
        ("http://[::1/", "host"),
        ("http://example.com:99999/", "host"),
        ("http://example.com:port/", "host"),
        ("http://exam\\ple.com/", "host"),
        ("http://127.0.0.1/", "private"),
        ("http://127.0.0.1:8000/v.mp4", "private"),
        ("http://localhost/", "private"),
        ("http://LOCALHOST./", "private"),
        ("http://api.localhost/", "private"),
        ("http://[::1]/", "private"),
        ("http://[::ffff:127.0.0.1]/", "private"),
        ("http://[::ffff:a9fe:a9fe]/", "private"),
        ("http://2130706433/", "private"),
        ("http://0x7f.1/", "private"),
        ("http://0177.0.0.1/", "private"),
        ("http://127.1/", "private"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "private"),
        ("http://100.64.0.1/", "private"),
        ("http://0.0.0.0/", "private"),
        ("http://224.0.0.1/", "private"),
        ("http://[fe80::1]/", "private"),
        ("http://[fd00::1]/", "private"),
        # Hosts that only look numeric are no address at all (issue 18).
        ("http://7147006462/", "host"),
        ("http://425.510.425.510/", "host"),
        ("http://0x41414141A9FEA9FE/", "host"),
        ("http://example.0x10/", "host"),
        ("http://①②⑦.⓪.⓪.①/", "host"),
        ("http://⑦①④⑦⓪⓪⑥④⑥②/", "host"),
        ("http://١٢٧.٠.٠.١/", "host"),
        ("https://example.com/%ff", "encoding"),
        ("https://example.com/v?q=%c0%af", "encoding"),
        ("", "required"),
        ("   ", "required"),
        (None, "required"),
    ],
)
def test_hostile_url_is_refused_with_a_field_message(raw, code):
    with pytest.raises(InvalidURL) as caught:
        validate_url(raw, policy=PUBLIC_ONLY)
    error = caught.value.error_list[0]
    assert error.code == code
    # A translatable sentence for the form field, not a traceback.
    assert isinstance(error.message, Promise)
    assert caught.value.messages[0].endswith(".")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://www.youtube.com/watch?v=abc&t=1#comments",
         "https://www.youtube.com/watch?v=abc&t=1"),
        ("HTTP://Example.COM:80/Path/To?b=2&a=1", "http://example.com/Path/To?b=2&a=1"),
        ("https://example.com:443", "https://example.com/"),
        ("http://example.com:8080/x", "http://example.com:8080/x"),
        ("https://example.com:80/x", "https://example.com:80/x"),
        ("  https://example.com/clip.mp4  ", "https://example.com/clip.mp4"),
        ("http://bücher.example/film", "http://xn--bcher-kva.example/film"),
        ("http://8.8.8.8/v.mp4", "http://8.8.8.8/v.mp4"),
        ("http://cafe.face/v.mp4", "http://cafe.face/v.mp4"),  # hex letters, not a number
        ("http://2001.example/v", "http://2001.example/v"),
        ("https://example.com/caf%C3%A9", "https://example.com/caf%C3%A9"),
        ("http://[2001:4860:4860:0:0:0:0:8888]/v", "http://[2001:4860:4860::8888]/v"),
        ("https://cdn.example.com/a/b.m3u8?token=x%20y",
         "https://cdn.example.com/a/b.m3u8?token=x%20y"),
    ],
)
def test_acceptable_url_is_normalised(raw, expected):
    assert validate_url(raw, policy=PUBLIC_ONLY) == expected


def test_the_same_video_written_two_ways_normalises_to_one_key():
    assert normalise_url("HTTPS://Example.com:443/v?id=1#t=5") == normalise_url(
        "https://example.com/v?id=1")
    # Query order is meaningful to some servers: it is kept, so these differ.
    assert normalise_url("https://example.com/v?a=1&b=2") != normalise_url(
        "https://example.com/v?b=2&a=1")


def test_an_allowed_local_destination_passes_only_on_its_port():
    policy = EgressPolicy.from_setting("127.0.0.1:8000")
    for url in ("http://127.0.0.1:8000/v.mp4", "http://localhost:8000/v.mp4"):
        assert validate_url(url, policy=policy) == url
    with pytest.raises(InvalidURL):
        validate_url("http://127.0.0.1:8001/v.mp4", policy=policy)


@override_settings(DOWNLOADS_MAX_URL_LENGTH=40)
def test_the_length_limit_comes_from_settings():
    validate_url("https://example.com/" + "a" * 20, policy=PUBLIC_ONLY)
    with pytest.raises(InvalidURL) as caught:
        validate_url("https://example.com/" + "a" * 21, policy=PUBLIC_ONLY)
    assert "41" in caught.value.messages[0] and "40" in caught.value.messages[0]


def test_the_policy_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("DOWNLOADS_EGRESS_ALLOW", "10.1.0.0/16")
    assert validate_url("http://10.1.2.3/v.mp4") == "http://10.1.2.3/v.mp4"
    with pytest.raises(InvalidURL):
        validate_url("http://10.2.0.1/v.mp4")


@pytest.mark.parametrize("spelling", [
    "http://127.0.0.1:8001/sample.mp4", "http://127.1:8001/sample.mp4",
    "http://0177.0.0.1:8001/sample.mp4", "http://0x7f.0.0.1:8001/sample.mp4",
    "http://2130706433:8001/sample.mp4", "http://[::ffff:127.0.0.1]:8001/sample.mp4",
    "http://127.0.0.1.:8001/sample.mp4",
])
def test_every_spelling_of_an_ip_literal_host_normalises_to_one(spelling):
    assert normalise_url(spelling) == "http://127.0.0.1:8001/sample.mp4"


def test_named_hosts_and_plain_ipv6_literals_keep_their_form():
    assert normalise_url("http://cafe.face/x") == "http://cafe.face/x"
    assert normalise_url("http://[2001:DB8::1]/x") == "http://[2001:db8::1]/x"
