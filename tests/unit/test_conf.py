"""The engine's knobs: read once, kept until settings change, checked when read."""

from collections import Counter

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from jobs import conf


class _CountedSettings:
    """Django's settings, counting the reads of each name."""

    def __init__(self):
        self.reads = Counter()

    def __getattr__(self, name):
        self.reads[name] += 1
        return getattr(django_settings, name)


def test_a_knob_is_read_once_and_kept_until_a_setting_changes(settings, monkeypatch):
    settings.JOBS_POLL_SECONDS = 3
    counted = _CountedSettings()
    monkeypatch.setattr(conf, "settings", counted)
    assert [conf.JOBS_POLL_SECONDS for _ in range(3)] == [3.0] * 3
    assert type(conf.JOBS_POLL_SECONDS) is float  # its default's type
    assert counted.reads["JOBS_POLL_SECONDS"] == 1

    settings.JOBS_POLL_SECONDS = 7
    assert conf.JOBS_POLL_SECONDS == 7.0
    assert counted.reads["JOBS_POLL_SECONDS"] == 2


def test_a_changed_setting_is_seen_and_its_end_brings_the_default_back():
    default = conf.DEFAULTS["JOBS_MAX_PAYLOAD_DEPTH"]
    assert conf.JOBS_MAX_PAYLOAD_DEPTH == default
    with override_settings(JOBS_MAX_PAYLOAD_DEPTH=4):
        assert conf.JOBS_MAX_PAYLOAD_DEPTH == 4
    assert conf.JOBS_MAX_PAYLOAD_DEPTH == default


def test_a_setting_that_is_not_a_number_is_refused_at_each_read_until_mended(settings):
    settings.JOBS_LEASE_SECONDS = "soon"
    for _ in range(2):  # not kept: the next read says so again
        with pytest.raises(ImproperlyConfigured, match="JOBS_LEASE_SECONDS must be a number"):
            _ = conf.JOBS_LEASE_SECONDS
    settings.JOBS_LEASE_SECONDS = 45
    assert conf.JOBS_LEASE_SECONDS == 45.0


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        _ = conf.JOBS_NO_SUCH_KNOB
