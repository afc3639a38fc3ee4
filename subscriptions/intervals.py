"""Check intervals: the choices the form offers and how an interval reads."""

from django.utils.translation import ngettext

from subscriptions import conf

MINUTE_S, HOUR_S, DAY_S, WEEK_S = 60, 3600, 86400, 7 * 86400
PRESETS_S = (5 * MINUTE_S, 15 * MINUTE_S, 30 * MINUTE_S, HOUR_S, 3 * HOUR_S, 6 * HOUR_S,
             12 * HOUR_S, DAY_S, WEEK_S)


def describe_interval(seconds):
    """'15 minutes', '1 hour', '2 days': the largest unit that divides `seconds` exactly."""
    seconds = int(seconds)
    if seconds and seconds % WEEK_S == 0:
        n = seconds // WEEK_S
        return ngettext("%(n)d week", "%(n)d weeks", n) % {"n": n}
    if seconds and seconds % DAY_S == 0:
        n = seconds // DAY_S
        return ngettext("%(n)d day", "%(n)d days", n) % {"n": n}
    if seconds and seconds % HOUR_S == 0:
        n = seconds // HOUR_S
        return ngettext("%(n)d hour", "%(n)d hours", n) % {"n": n}
    if seconds and seconds % MINUTE_S == 0:
        n = seconds // MINUTE_S
        return ngettext("%(n)d minute", "%(n)d minutes", n) % {"n": n}
    return ngettext("%(n)d second", "%(n)d seconds", seconds) % {"n": seconds}


def choices():
    """(seconds, label) for the presets the settings allow, with the default and the limits."""
    low, high = conf.min_interval_s(), conf.max_interval_s()
    offered = {s for s in PRESETS_S if low <= s <= high}
    default = conf.default_interval_s()
    if low <= default <= high:
        offered.add(default)
    if not offered:
        offered.add(low)
    return [(seconds, describe_interval(seconds)) for seconds in sorted(offered)]


def initial():
    """The interval the form selects first: the default, or the nearest allowed one."""
    default = conf.default_interval_s()
    return min((seconds for seconds, _label in choices()), key=lambda s: abs(s - default))
