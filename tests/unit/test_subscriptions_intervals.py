"""Check intervals and subscription settings: what the form offers, how an interval reads, what
the service accepts, and environment overrides. No database."""

import pytest
from django.core.exceptions import ValidationError

from project.env import SettingsError
from subscriptions import conf, intervals
from subscriptions.services import validate_interval

pytestmark = pytest.mark.dbless


@pytest.mark.parametrize("seconds, words", [
    (45, "45 seconds"), (60, "1 minute"), (300, "5 minutes"), (5400, "90 minutes"),
    (3600, "1 hour"), (7200, "2 hours"), (86400, "1 day"), (3 * 86400, "3 days"),
    (604800, "1 week"), (1209600, "2 weeks"),
])
def test_an_interval_reads_in_its_largest_exact_unit(seconds, words):
    assert intervals.describe_interval(seconds) == words


def test_the_form_offers_presets_within_the_limits_with_the_default_selected(settings):
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = 900
    settings.SUBSCRIPTIONS_MAX_INTERVAL_S = 86400
    settings.SUBSCRIPTIONS_DEFAULT_INTERVAL_S = 3600
    offered = [seconds for seconds, _label in intervals.choices()]
    assert offered == [900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400]
    assert intervals.initial() == 3600


def test_an_odd_default_is_offered_and_a_minimum_above_every_preset_still_gives_a_choice(
        settings):
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = 600
    settings.SUBSCRIPTIONS_MAX_INTERVAL_S = 7200
    settings.SUBSCRIPTIONS_DEFAULT_INTERVAL_S = 2700
    assert (2700, "45 minutes") in intervals.choices()
    assert intervals.initial() == 2700
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = settings.SUBSCRIPTIONS_MAX_INTERVAL_S = 10 * 86400
    assert intervals.choices() == [(10 * 86400, "10 days")]
    assert intervals.initial() == 10 * 86400


@pytest.mark.parametrize("value, code", [
    (299, "interval_short"), (0, "interval_short"), (-5, "interval_short"),
    (30 * 86400 + 1, "interval_long"), (3600.0, "interval"), ("3600", "interval"),
    (None, "interval"), (True, "interval"),
])
def test_the_service_refuses_intervals_outside_the_limits(settings, value, code):
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = 300
    settings.SUBSCRIPTIONS_MAX_INTERVAL_S = 30 * 86400
    with pytest.raises(ValidationError) as refused:
        validate_interval(value)
    assert refused.value.code == code


def test_the_limits_themselves_are_accepted(settings):
    settings.SUBSCRIPTIONS_MIN_INTERVAL_S = 300
    settings.SUBSCRIPTIONS_MAX_INTERVAL_S = 86400
    validate_interval(300)
    validate_interval(86400)


def test_defaults_and_environment_overrides(monkeypatch):
    assert conf.min_interval_s() == 300
    assert conf.default_interval_s() == 3600
    monkeypatch.setenv("SUBSCRIPTIONS_LIST_LIMIT", "7")
    assert conf.list_limit() == 7
    monkeypatch.setenv("SUBSCRIPTIONS_MIN_INTERVAL_S", "soon")
    with pytest.raises(SettingsError, match="SUBSCRIPTIONS_MIN_INTERVAL_S"):
        conf.min_interval_s()
    monkeypatch.setenv("SUBSCRIPTIONS_MIN_INTERVAL_S", "0")
    with pytest.raises(SettingsError, match="at least 1"):
        conf.min_interval_s()
