"""The ranges of the numbers staff edit live, and how the engine reads them back.

Forms and model validators refuse a value outside its range with a sentence
staff can act on. The worker reads settings rows through `sane()`: a value
that got past them (written by hand, or before the bound existed) is logged
and used as the nearest value in range, because a worker never dies of data.
"""

import logging

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
