import logging
import math

import pytest

from jobs.bounds import GAP_SECONDS_MAX, LIMIT_MAX, sane


@pytest.mark.parametrize(("value", "expected"), [
    (0.0, 0.0), (20.0, 20.0), (GAP_SECONDS_MAX, GAP_SECONDS_MAX),
    (1e308, GAP_SECONDS_MAX), (math.inf, GAP_SECONDS_MAX), (-5.0, 0.0), (-math.inf, 0.0),
    (10**400, GAP_SECONDS_MAX),
])
def test_a_number_out_of_range_is_read_as_the_nearest_bound(value, expected):
    assert sane(value, low=0.0, high=GAP_SECONDS_MAX, what="gap", default=0.0) == expected


@pytest.mark.parametrize("value", [math.nan, "abc", None, [], True, {"x": 1}])
def test_what_is_no_number_is_read_as_the_default(value):
    assert sane(value, low=0, high=LIMIT_MAX, what="limit", default=1) == 1


def test_each_correction_is_logged_and_a_sane_value_is_not(caplog):
    with caplog.at_level(logging.WARNING, logger="jobs.bounds"):
        assert sane(7, low=0, high=LIMIT_MAX, what="the limit of key 'user:1'") == 7
        assert not caplog.records
        assert sane(10**25, low=0, high=LIMIT_MAX, what="the limit of key 'user:1'") == LIMIT_MAX
    assert "the limit of key 'user:1'" in caplog.text and str(LIMIT_MAX) in caplog.text
