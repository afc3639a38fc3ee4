"""The ranges of the numbers staff edit live, and how the engine reads them back.

Forms and model validators refuse a value outside its range with a sentence
staff can act on. The worker reads settings rows through `sane()`: a value
that got past them (written by hand, or before the bound existed) is logged
and used as the nearest value in range, because a worker never dies of data.
"""

import logging
import re

from django.utils.translation import gettext as _

log = logging.getLogger(__name__)

LIMIT_MAX = 10_000  # jobs running at once, for a queue or a concurrency key
GAP_SECONDS_MAX = 7 * 86400.0  # the longest rest of a queue after each of its jobs
RATE_PERIOD_MAX_S = 7 * 86400.0  # the longest window of a rate limit


def sane(value, *, low, high, what, default=None):
    """`value` if it is a number within [low, high]; else the nearest bound (or `default`
    for something that is no number at all), with a warning naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        log.warning("%s is %r, not a number; using %r", what, value, default)
        return default
    if low <= value <= high:
        return value
    nearest = low if value < low else high
    log.warning("%s is %r, outside %s..%s; using %r", what, value, low, high, nearest)
    return nearest


RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([smh])\s*")
UNIT_S = {"s": 1, "m": 60, "h": 3600}


def parse_rate(text):
    """"10/m", "3/10s", "100/h" → (starts, period in seconds); ValueError with a sentence if not."""
    match = RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(_("A rate is a number of starts per period, like “10/m”, “3/10s” or "
                           "“100/h” (s, m or h), not %(text)r.") % {"text": text})
    count, size, unit = int(match[1]), float(match[2] or 1), match[3]
    period = size * UNIT_S[unit]
    if not 1 <= count <= LIMIT_MAX:
        raise ValueError(_("A rate allows from 1 to %(max)d starts per period, not %(n)d.")
                         % {"max": LIMIT_MAX, "n": count})
    if not 0.001 <= period <= RATE_PERIOD_MAX_S:
        raise ValueError(_("A rate's period is from a millisecond to %(days)d days, not %(text)r.")
                         % {"days": RATE_PERIOD_MAX_S // 86400, "text": text})
    return count, period
