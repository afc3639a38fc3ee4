"""Subscription settings: each read from Django settings when defined there, else the environment.

Functions rather than constants so that a test (or a worker started with a
different environment) sees the value in force at the call.
"""


from project import env

_setting = env.setting


def _int(minimum):
    return lambda name, default: env.get_number(name, default, kind=int, minimum=minimum)


def _seconds(minimum):
    return lambda name, default: env.get_number(name, default, minimum=minimum)


def min_interval_s():
    """SUBSCRIPTIONS_MIN_INTERVAL_S: the shortest interval between two checks (5 minutes)."""
    return _setting("SUBSCRIPTIONS_MIN_INTERVAL_S", 300, _int(1))


def max_interval_s():
    """SUBSCRIPTIONS_MAX_INTERVAL_S: the longest interval between two checks (30 days)."""
    return _setting("SUBSCRIPTIONS_MAX_INTERVAL_S", 30 * 86400, _int(1))


def default_interval_s():
    """SUBSCRIPTIONS_DEFAULT_INTERVAL_S: the interval the form offers first (1 hour)."""
    return _setting("SUBSCRIPTIONS_DEFAULT_INTERVAL_S", 3600, _int(1))


def list_limit():
    """SUBSCRIPTIONS_LIST_LIMIT: most entries one check lists (the first ones of the playlist)."""
    return _setting("SUBSCRIPTIONS_LIST_LIMIT", 30, _int(1))


def max_per_user():
    """SUBSCRIPTIONS_MAX_PER_USER: most subscriptions one user may hold."""
    return _setting("SUBSCRIPTIONS_MAX_PER_USER", 100, _int(1))


def due_batch():
    """SUBSCRIPTIONS_DUE_BATCH: most checks one call of check_due() enqueues (the rest wait for
    the next call), so a call stays short however many subscriptions fall due at once."""
    return _setting("SUBSCRIPTIONS_DUE_BATCH", 500, _int(1))


# --- The check job (read when the kind is registered, i.e. at process start) ------

def checks_per_user():
    """SUBSCRIPTIONS_CHECKS_PER_USER: checks of one user's subscriptions running at once."""
    return _setting("SUBSCRIPTIONS_CHECKS_PER_USER", 1, _int(1))


def check_attempts():
    """SUBSCRIPTIONS_CHECK_ATTEMPTS: attempts of one check when the site cannot be reached."""
    return _setting("SUBSCRIPTIONS_CHECK_ATTEMPTS", 3, _int(1))


def check_stall_timeout_s():
    """SUBSCRIPTIONS_CHECK_STALL_TIMEOUT_S: seconds a check may go without a sign of life
    (a listing that hangs) before it is stopped."""
    return _setting("SUBSCRIPTIONS_CHECK_STALL_TIMEOUT_S", 180.0, _seconds(0.5))


def check_wall_clock_cap_s():
    """SUBSCRIPTIONS_CHECK_WALL_CLOCK_CAP_S: the longest one attempt of a check may run."""
    return _setting("SUBSCRIPTIONS_CHECK_WALL_CLOCK_CAP_S", 600.0, _seconds(1))


def check_kill_grace_s():
    """SUBSCRIPTIONS_CHECK_KILL_GRACE_S: seconds between TERM and KILL when a check is stopped."""
    return _setting("SUBSCRIPTIONS_CHECK_KILL_GRACE_S", 5.0, _seconds(0))


def check_memory_limit_bytes():
    """SUBSCRIPTIONS_CHECK_MEMORY_LIMIT: the most memory (RLIMIT_DATA: heap and other private
    writable memory) a check's process may use, e.g. 1G; 0 means no cap. A check lists a
    playlist with yt-dlp in about 80 MiB; the pages it reads are capped by
    DOWNLOADS_MAX_PAGE_BYTES."""
    from downloads.conf import memory_bytes

    return memory_bytes("SUBSCRIPTIONS_CHECK_MEMORY_LIMIT", 1024**3)
