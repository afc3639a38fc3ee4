"""Insight settings: each a Django setting of the same name, else the environment variable.

Functions rather than constants, so a test or an operator sees the value in
force at the call. The queue's live limits (concurrency, gap) are not here:
INSIGHTS_CONCURRENCY and INSIGHTS_GAP_SECONDS seed the `insights` Queue row
through JOBS_QUEUES (project/settings.py), and staff edit that row afterwards.
"""


from project import env

QUEUE = "insights"  # the AI gateway's: one generation at a time, a gap after each
# The embedded local generator's: it writes in milliseconds and spares nobody's gateway,
# so its insights need neither the single slot nor the gap (project/settings.py declares it).
LOCAL_QUEUE = "insights-local"

# The two tiers, as engine priorities (higher runs first); the admin names the same tiers.
INTERACTIVE = 10  # a page the user has open right now
PREFETCH = -10  # backfill after new data arrived


_setting = env.setting


def _number(kind=float, minimum=0):
    return lambda name, default: env.get_number(name, default, kind, minimum=minimum)


def gateway_url():
    """INSIGHTS_GATEWAY_URL: base URL of an OpenAI-compatible API (e.g. https://host/v1);
    empty means the embedded local generator."""
    return _setting("INSIGHTS_GATEWAY_URL", "", env.get_str).strip()


def queue():
    """The queue a generation is enqueued on now: the gateway's when one is configured."""
    return QUEUE if gateway_url() else LOCAL_QUEUE


def model():
    """INSIGHTS_MODEL: the model name sent to the gateway."""
    return _setting("INSIGHTS_MODEL", "gpt-4o-mini", env.get_str).strip()


def api_key():
    """INSIGHTS_API_KEY: sent as a bearer token to the gateway; empty sends none."""
    return _setting("INSIGHTS_API_KEY", "", env.get_str).strip()


def connect_timeout_s():
    """INSIGHTS_CONNECT_TIMEOUT_SECONDS: how long to wait for the gateway to accept a connection."""
    return _setting("INSIGHTS_CONNECT_TIMEOUT_SECONDS", 10.0, _number(minimum=0.1))


def read_timeout_s():
    """INSIGHTS_READ_TIMEOUT_SECONDS: how long one generation may take to answer (they are slow)."""
    return _setting("INSIGHTS_READ_TIMEOUT_SECONDS", 300.0, _number(minimum=0.1))


def max_answer_bytes():
    """INSIGHTS_MAX_ANSWER_BYTES: the largest answer read from the gateway (1 MiB); a longer one
    fails the generation (`answer_too_large`). A completion of 800 tokens is a few kilobytes."""
    return _setting("INSIGHTS_MAX_ANSWER_BYTES", 1024**2, _number(int, minimum=1024))


def concurrency():
    """INSIGHTS_CONCURRENCY: generations running at once across the deployment (seeds the queue)."""
    return _setting("INSIGHTS_CONCURRENCY", 1, _number(int, minimum=1))


def gap_seconds():
    """INSIGHTS_GAP_SECONDS: least time between two generation starts (seeds the queue)."""
    return _setting("INSIGHTS_GAP_SECONDS", 20.0, _number())


def max_attempts():
    """INSIGHTS_MAX_ATTEMPTS: attempts of one generation before it is given up (until its cool-down)."""
    return _setting("INSIGHTS_MAX_ATTEMPTS", 3, _number(int, minimum=1))


def retry_after_s():
    """INSIGHTS_RETRY_AFTER_SECONDS: a given-up generation asked for again this long after it
    failed is tried again, attempts reset (before that, the request returns the failure).
    Read when the kinds are registered (process start)."""
    return _setting("INSIGHTS_RETRY_AFTER_SECONDS", 1800.0, _number(minimum=1))


def user_concurrency():
    """INSIGHTS_USER_CONCURRENCY: one user's generations running at once (the engine key
    "insights-user:<id>"; staff raise it for a user in the admin's concurrency limits)."""
    return _setting("INSIGHTS_USER_CONCURRENCY", 1, _number(int, minimum=1))


def user_queued():
    """INSIGHTS_USER_QUEUED: one user's insights waiting or being written at once; a request
    past it is refused (429). It bounds how far one user's burst can put another user's
    request back (behind at most this many at one priority). Prefetches stop at it too, and
    never count against what the user asks for."""
    return _setting("INSIGHTS_USER_QUEUED", 5, _number(int, minimum=1))


def prefetch():
    """INSIGHTS_PREFETCH: queue insights at prefetch priority when new shot data arrives."""
    return _setting("INSIGHTS_PREFETCH", True, env.get_bool)


def backfill_active_days():
    """Users who logged in or downloaded within this many days get the daily overview backfill."""
    return _setting("INSIGHTS_BACKFILL_ACTIVE_DAYS", 30, _number(int, minimum=1))
