"""Turning an insight's facts into text: the AI gateway when configured, else the local generator.

The gateway is any OpenAI-compatible chat-completions endpoint, reached with
httpx. Its answers are sorted for the engine: "busy, come back later" (a 429,
or a 503 with a Retry-After) snoozes the job until then, spending no attempt,
so a busy gateway cannot use up an insight's attempts; another server error
(5xx) or an unreachable gateway is worth another attempt (`Retry`, with the
gateway's Retry-After when it sent one); any other 4xx will fail the same way
every time (`Fail`, with the gateway's own message). An answer is read as it
streams in, and one longer than INSIGHTS_MAX_ANSWER_BYTES is refused as soon as
it passes that (`Fail`, `answer_too_large`): a gateway gone wrong cannot fill
the worker's memory.

The local generator needs nothing: it writes a short, deterministic summary
from the same facts, so the pipeline works offline and in tests.
"""

import email.utils
import json
import math
import time
from dataclasses import dataclass

from django.template.defaultfilters import filesizeformat
from django.utils.translation import get_language_info, gettext, ngettext

from insights import conf
from insights.models import Generator, InsightKind
from jobs.exceptions import Fail, Retry, Snooze

LOCAL_MODEL = "haulage-local-1"
MAX_TOKENS = 800
MAX_TEXT_CHARS = 20_000  # what is kept of an answer; a summary is a few hundred
MAX_ERROR_CHARS = 500
# A gateway asking for longer than an hour is asked again after one (it is
# busy, not gone); one asking for less than a second waits a second.
MAX_RETRY_AFTER_S = 3600.0
MIN_SNOOZE_S = 1.0
RATE_LIMIT_SNOOZE_S = 60.0  # a 429 that does not say how long to wait


@dataclass(frozen=True)
class Generated:
    text: str
    generator: str  # Generator.GATEWAY or Generator.LOCAL
    model: str


def generate(kind, facts, *, language):
    """Write the insight of `kind` from `facts` in `language` (the caller activated it)."""
    if conf.gateway_url():
        return gateway_generate(kind, facts, language=language)
    return Generated(local_text(kind, facts), Generator.LOCAL, LOCAL_MODEL)


# --- The gateway ------------------------------------------------------------------

PROMPTS = {
    InsightKind.VIDEO_SUMMARY: (
        "You summarise a video for the person who downloaded it. From the JSON facts (title, "
        "length, description, shots with brightness, motion and colours measured from the "
        "frames), write a short summary of what the video is and how it is put together: "
        "pacing, how the shots change, anything striking. Three to six sentences, no lists."
    ),
    InsightKind.SHOT_NOTES: (
        "You write notes on one shot of a video. From the JSON facts (timing, brightness, "
        "motion over time, dominant colours), describe the shot's look and movement in two to "
        "four sentences, as an editor would."
    ),
    InsightKind.LIBRARY_OVERVIEW: (
        "You give a person an overview of their video and audio library. From the JSON facts "
        "(counts, total length and size, recent downloads, the longest item), write three to "
        "five friendly, concrete sentences about what the library holds and what they did lately."
    ),
}


def completions_url(base):
    """The chat-completions endpoint under a gateway's base URL (given with or without it)."""
    base = base.rstrip("/")
    return base if base.endswith("/chat/completions") else f"{base}/chat/completions"


def gateway_generate(kind, facts, *, language):
    url = completions_url(conf.gateway_url())
    model = conf.model()
    language_name = get_language_info(language)["name"] if language else "English"
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": f"{PROMPTS[InsightKind(kind)]} Write in {language_name}."},
            {"role": "user", "content": json.dumps(facts, ensure_ascii=False, sort_keys=True)},
        ],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.3,
    }
    # Uncompressed: the answer's size limit then counts what is held in memory, not a
    # compressed body that expands a thousandfold.
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    if conf.api_key():
        headers["Authorization"] = f"Bearer {conf.api_key()}"
    # Imported here, not at the top: every worker and child process loads this
    # module at start-up, and only a gateway call needs httpx (~0.15 s to import).
    import httpx

    timeout = httpx.Timeout(conf.read_timeout_s(), connect=conf.connect_timeout_s())
    try:
        # A fresh client per generation: they are minutes apart, and a pooled
        # connection the gateway closed meanwhile would only fail the next one.
        with httpx.Client(timeout=timeout, follow_redirects=False) as client, \
                client.stream("POST", url, json=body, headers=headers) as streamed:
            response = _read_capped(streamed, conf.max_answer_bytes())
    except httpx.TimeoutException as exc:
        raise Retry(gettext("The AI gateway did not answer in time (%(error)s).")
                    % {"error": type(exc).__name__}, code="gateway_timeout") from exc
    except httpx.HTTPError as exc:
        raise Retry(gettext("The AI gateway could not be reached (%(error)s).")
                    % {"error": type(exc).__name__}, code="gateway_unreachable") from exc
    return Generated(_answer(response), Generator.GATEWAY, model)


def _read_capped(streamed, limit):
    """The streamed answer, read whole; `Fail` as soon as it passes `limit` bytes."""
    import httpx

    announced = streamed.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > limit:
        raise _too_large(limit)
    body = bytearray()
    for chunk in streamed.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    # Decoded already: the copy keeps no Content-Encoding that would decode it twice.
    headers = [(name, value) for name, value in streamed.headers.multi_items()
               if name.lower() != "content-encoding"]
    return httpx.Response(streamed.status_code, headers=headers, content=bytes(body),
                          request=streamed.request)


def _too_large(limit):
    return Fail(gettext("The AI gateway answered with more than %(limit)s; the answer was "
                        "refused.") % {"limit": filesizeformat(limit)}, code="answer_too_large")


def _answer(response):
    status = response.status_code
    wait_s = retry_after_s(response.headers.get("Retry-After"))
    if status == 429:
        raise Snooze(max(MIN_SNOOZE_S, RATE_LIMIT_SNOOZE_S if wait_s is None else wait_s),
                     gettext("The AI gateway is busy (rate limited); trying again later."),
                     code="rate_limited")
    if status == 503 and wait_s is not None:
        raise Snooze(max(MIN_SNOOZE_S, wait_s),
                     gettext("The AI gateway is overloaded (HTTP 503); trying again when it said to."),
                     code="gateway_busy")
    if status >= 500:
        raise Retry(gettext("The AI gateway failed (HTTP %(status)d): %(message)s")
                    % {"status": status, "message": _error_message(response)},
                    delay_s=wait_s, code="gateway_error")
    if status >= 400:
        raise Fail(gettext("The AI gateway refused the request (HTTP %(status)d): %(message)s")
                   % {"status": status, "message": _error_message(response)}, code="gateway_refused")
    if status != 200:
        raise Retry(gettext("The AI gateway answered HTTP %(status)d.") % {"status": status},
                    code="bad_response")
    try:
        text = response.json()["choices"][0]["message"]["content"]
    except (ValueError, LookupError, TypeError):
        raise Retry(gettext("The AI gateway's answer was not a chat completion."),
                    code="bad_response") from None
    if not isinstance(text, str) or not text.strip():
        raise Retry(gettext("The AI gateway answered with no text."), code="bad_response")
    return text.strip()[:MAX_TEXT_CHARS]


def _error_message(response):
    """The gateway's own words: OpenAI's {"error": {"message"}}, {"error": "..."}, {"detail"}, or text."""
    try:
        data = response.json()
    except ValueError:
        data = None
    message = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        message = message or data.get("message") or data.get("detail")
    if not isinstance(message, str) or not message.strip():
        message = response.text.strip() or response.reason_phrase
    return " ".join(message.split())[:MAX_ERROR_CHARS]


def retry_after_s(value, *, now=None):
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date), from 0 to
    MAX_RETRY_AFTER_S; None when it is missing or not one of those."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None or when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


# --- The local generator ----------------------------------------------------------


def local_text(kind, facts):
    """A deterministic summary of `facts` in the active language."""
    writer = {
        InsightKind.VIDEO_SUMMARY: _local_video,
        InsightKind.SHOT_NOTES: _local_shot,
        InsightKind.LIBRARY_OVERVIEW: _local_library,
    }[InsightKind(kind)]
    return " ".join(sentence for sentence in writer(facts) if sentence)


def clock(seconds):
    """1:02:03, 4:05 or 0:07."""
    total = int(round(seconds or 0))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _brightness_word(value):
    if value < 0.25:
        return gettext("dark")
    if value < 0.6:
        return gettext("evenly lit")
    return gettext("bright")


def _motion_word(value):
    if value < 0.01:
        return gettext("nearly still")
    if value < 0.05:
        return gettext("gently moving")
    return gettext("busy")


def _colors(colors):
    return ", ".join(c["hex"] for c in colors if c.get("hex"))


def _local_video(facts):
    title = facts.get("title") or gettext("This recording")
    duration = facts.get("duration_s")
    kind = gettext("audio recording") if facts.get("audio_only") else gettext("video")
    if duration:
        yield gettext("“%(title)s” is a %(kind)s of %(length)s.") % {
            "title": title, "kind": kind, "length": clock(duration)}
    else:
        yield gettext("“%(title)s” is a %(kind)s.") % {"title": title, "kind": kind}
    if facts.get("uploader"):
        yield gettext("It comes from %(uploader)s.") % {"uploader": facts["uploader"]}
    if facts.get("width") and facts.get("height"):
        yield gettext("The picture is %(width)d×%(height)d.") % {
            "width": facts["width"], "height": facts["height"]}
    shots = facts.get("shots") or []
    if shots:
        lengths = [(s["end_s"] or 0) - (s["start_s"] or 0) for s in shots]
        longest = max(range(len(shots)), key=lambda i: lengths[i])
        yield ngettext(
            "It is one continuous shot.",
            "It is cut into %(count)d shots, %(average).1f seconds each on average; the longest "
            "(shot %(number)d, from %(start)s) lasts %(longest).1f seconds.",
            len(shots),
        ) % {"count": len(shots), "average": sum(lengths) / len(shots),
             "number": shots[longest]["index"] + 1, "start": clock(shots[longest]["start_s"]),
             "longest": lengths[longest]}
        analysed = [s for s in shots if s.get("analysis")]
        if analysed:
            busiest = max(analysed, key=lambda s: s["analysis"].get("motion_mean") or 0)
            brightness = [s["analysis"]["brightness"] for s in analysed
                          if s["analysis"].get("brightness") is not None]
            if brightness:
                yield ngettext("In its one analysed shot it is %(look)s.",
                               "Across %(count)d analysed shots it is %(look)s overall.",
                               len(analysed)) % {
                    "count": len(analysed), "look": _brightness_word(sum(brightness) / len(brightness))}
            yield gettext("The most movement is in shot %(number)d (from %(start)s).") % {
                "number": busiest["index"] + 1, "start": clock(busiest["start_s"])}
    description = " ".join((facts.get("description") or "").split())
    if description:
        first = description[:280].rsplit(" ", 1)[0] if len(description) > 280 else description
        yield gettext("Its description begins: “%(text)s”.") % {
            "text": first + ("…" if len(description) > 280 else "")}


def _local_shot(facts):
    number = (facts.get("index") or 0) + 1
    start, end = facts.get("start_s") or 0, facts.get("end_s") or 0
    yield gettext("Shot %(number)d of “%(title)s” runs from %(start)s to %(end)s "
                  "(%(length).1f seconds).") % {
        "number": number, "title": facts.get("video_title") or "", "start": clock(start),
        "end": clock(end), "length": max(0.0, end - start)}
    analysis = facts.get("analysis")
    if not analysis:
        yield gettext("It has not been analysed yet.")
        return
    if analysis.get("brightness") is not None:
        yield gettext("It is %(look)s (brightness %(value).2f).") % {
            "look": _brightness_word(analysis["brightness"]), "value": analysis["brightness"]}
    if analysis.get("motion_mean") is not None:
        yield gettext("The picture is %(motion)s.") % {"motion": _motion_word(analysis["motion_mean"])}
    if analysis.get("motion_peak_at_s") is not None and (analysis.get("motion_peak") or 0) >= 0.01:
        yield gettext("Movement peaks %(at).1f seconds in.") % {"at": analysis["motion_peak_at_s"]}
    if analysis.get("colors"):
        yield gettext("Its main colours are %(colors)s.") % {"colors": _colors(analysis["colors"])}


def _local_library(facts):
    count = facts.get("downloads") or 0
    if not count:
        yield gettext("Your library is empty so far: finished downloads will appear here.")
        if facts.get("failed"):
            yield ngettext("%(count)d download failed.", "%(count)d downloads failed.",
                           facts["failed"]) % {"count": facts["failed"]}
        return
    yield ngettext(
        "Your library holds %(count)d finished download (%(videos)d video, %(audio)d audio).",
        "Your library holds %(count)d finished downloads (%(videos)d video, %(audio)d audio).",
        count,
    ) % {"count": count, "videos": facts.get("videos") or 0, "audio": facts.get("audio") or 0}
    if facts.get("total_duration_s"):
        yield gettext("Together they run %(length)s and take %(size)s.") % {
            "length": clock(facts["total_duration_s"]), "size": filesizeformat(facts.get("total_bytes") or 0)}
    longest = facts.get("longest")
    if longest:
        yield gettext("The longest is “%(title)s” (%(length)s).") % {
            "title": longest["title"], "length": clock(longest["duration_s"])}
    recent = facts.get("recent") or []
    if recent:
        titles = ", ".join(f"“{item['title']}”" for item in recent[:3])
        yield gettext("Most recently you added %(titles)s, the last on %(day)s.") % {
            "titles": titles, "day": recent[0]["day"]}
    if facts.get("first_day") and facts.get("first_day") != facts.get("last_day"):
        yield gettext("Your first download dates from %(day)s.") % {"day": facts["first_day"]}
    if facts.get("failed"):
        yield ngettext("%(count)d download failed.", "%(count)d downloads failed.",
                       facts["failed"]) % {"count": facts["failed"]}
