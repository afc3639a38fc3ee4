"""The gateway client's sorting of answers and the local generator, without a database."""

import email.utils
import time

import httpx
import pytest

from insights import generators
from insights.models import InsightKind
from insights.templatetags.insights_tags import span
from jobs.exceptions import Fail, Retry, Snooze


def answer(status, *, json=None, text=None, headers=None):
    request = httpx.Request("POST", "http://gateway.test/v1/chat/completions")
    if json is not None:
        return httpx.Response(status, json=json, headers=headers, request=request)
    return httpx.Response(status, text=text or "", headers=headers, request=request)


def completion(content):
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.mark.parametrize("value,expected", [
    ("120", 120.0), (" 7 ", 7.0), ("0", 0.0), ("-5", 0.0), ("soon", None), ("", None), (None, None),
    ("1e9", generators.MAX_RETRY_AFTER_S), ("nan", None),
])
def test_retry_after_in_seconds(value, expected):
    assert generators.retry_after_s(value) == expected


def test_retry_after_as_an_http_date():
    now = time.time()
    header = email.utils.formatdate(now + 90, usegmt=True)
    assert 88 <= generators.retry_after_s(header, now=now) <= 91
    assert generators.retry_after_s(email.utils.formatdate(now - 90, usegmt=True), now=now) == 0.0


@pytest.mark.parametrize("base", ["http://g/v1", "http://g/v1/", "http://g/v1/chat/completions"])
def test_the_completions_url(base):
    assert generators.completions_url(base) == "http://g/v1/chat/completions"


def test_a_completion_gives_its_text():
    assert generators._answer(answer(200, json=completion("  Hello.  "))) == "Hello."


@pytest.mark.parametrize("body", [
    {"error": {"message": "model not found"}}, {"error": "model not found"},
    {"detail": "model not found"}, None,
])
def test_a_4xx_fails_with_the_gateways_message(body):
    response = answer(404, json=body) if body else answer(404, text="model not found")
    with pytest.raises(Fail) as failure:
        generators._answer(response)
    assert "model not found" in str(failure.value) and failure.value.code == "gateway_refused"


@pytest.mark.parametrize("status,header,seconds", [
    (429, "30", 30.0), (429, None, generators.RATE_LIMIT_SNOOZE_S),
    (429, "soon", generators.RATE_LIMIT_SNOOZE_S), (429, "0", generators.MIN_SNOOZE_S),
    (429, "1e9", generators.MAX_RETRY_AFTER_S), (503, "2", 2.0),
    (503, "-7", generators.MIN_SNOOZE_S),
])
def test_busy_answers_snooze_for_the_retry_after(status, header, seconds):
    headers = {"Retry-After": header} if header is not None else {}
    with pytest.raises(Snooze) as busy:
        generators._answer(answer(status, json={}, headers=headers))
    assert busy.value.seconds == seconds
    assert busy.value.code == ("rate_limited" if status == 429 else "gateway_busy")


def test_a_503_until_an_http_date_snoozes_until_then():
    header = email.utils.formatdate(time.time() + 90, usegmt=True)
    with pytest.raises(Snooze) as busy:
        generators._answer(answer(503, json={}, headers={"Retry-After": header}))
    assert 85 <= busy.value.seconds <= 91


@pytest.mark.parametrize("status,headers", [
    (502, {}), (500, {}), (503, {}), (503, {"Retry-After": "whenever"}), (503, {"Retry-After": "nan"}),
])
def test_other_server_errors_are_retried_with_backoff(status, headers):
    with pytest.raises(Retry) as broken:
        generators._answer(answer(status, text="bad gateway", headers=headers))
    assert (broken.value.delay_s, broken.value.code) == (None, "gateway_error")
    assert "bad gateway" in str(broken.value)


@pytest.mark.parametrize("response", [
    answer(200, text="not json"), answer(200, json={"choices": []}), answer(200, json=completion("")),
    answer(200, json=completion(None)),
])
def test_an_answer_without_text_is_retried(response):
    with pytest.raises(Retry) as retry:
        generators._answer(response)
    assert retry.value.code == "bad_response"


def test_an_unreachable_gateway_is_retried(settings):
    settings.INSIGHTS_GATEWAY_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    settings.INSIGHTS_CONNECT_TIMEOUT_SECONDS = 1
    with pytest.raises(Retry) as retry:
        generators.generate(InsightKind.LIBRARY_OVERVIEW, {"downloads": 0}, language="en")
    assert retry.value.code in ("gateway_unreachable", "gateway_timeout")


SHOT = {"video_title": "Harbour", "video_duration_s": 20.0, "index": 2, "start_s": 10.0,
        "end_s": 15.0, "analysis": {"brightness": 0.71, "motion_mean": 0.07, "motion_peak_at_s": 2.5,
                                    "motion_peak": 0.2, "colors": [{"hex": "#112233", "share": 0.6}]}}


def test_local_shot_notes_read_the_analysis():
    text = generators.local_text(InsightKind.SHOT_NOTES, SHOT)
    assert text.startswith("Shot 3 of “Harbour” runs from 0:10 to 0:15 (5.0 seconds).")
    assert "bright" in text and "busy" in text and "2.5 seconds in" in text and "#112233" in text
    assert text == generators.local_text(InsightKind.SHOT_NOTES, dict(SHOT))


def test_local_video_summary_uses_shots_when_there_are_some():
    facts = {"title": "Harbour", "duration_s": 20.0, "audio_only": False, "uploader": "", "width": 320,
             "height": 240, "description": "", "shots": [
                 {"index": i, "start_s": i * 5.0, "end_s": i * 5.0 + 5.0 + (i == 1) * 2,
                  "analysis": {"brightness": 0.5, "motion_mean": 0.01 * i}} for i in range(3)]}
    text = generators.local_text(InsightKind.VIDEO_SUMMARY, facts)
    assert "“Harbour” is a video of 0:20." in text and "320×240" in text
    assert "cut into 3 shots" in text and "shot 2, from 0:05" in text
    assert "most movement is in shot 3" in text


def test_an_empty_library_says_so():
    text = generators.local_text(InsightKind.LIBRARY_OVERVIEW, {"downloads": 0, "failed": 1})
    assert "empty" in text and "1 download failed." in text


@pytest.mark.parametrize("seconds,words", [
    (20, "20 seconds"), (1, "1 second"), (1.5, "1.5 seconds"), (1800, "30 minutes"),
    (90, "90 seconds"), (7200, "2 hours"), (5400, "90 minutes"),
])
def test_spans_of_time_in_words(seconds, words):
    assert span(seconds) == words
