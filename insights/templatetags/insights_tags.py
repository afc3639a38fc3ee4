"""Small template filters for the insight and queue pages."""

from django import template
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

register = template.Library()


@register.filter
def span(seconds):
    """A setting's length of time in words: "20 seconds", "30 minutes", "1.5 hours"."""
    if seconds is None or seconds == "":
        return ""
    seconds = float(seconds)
    if seconds < 120:
        value = round(seconds, 1) if seconds % 1 else int(seconds)
        return ngettext("%(n)s second", "%(n)s seconds", value) % {"n": value}
    if seconds < 7200:
        value = round(seconds / 60, 1) if seconds % 60 else int(seconds // 60)
        return ngettext("%(n)s minute", "%(n)s minutes", value) % {"n": value}
    value = round(seconds / 3600, 1) if seconds % 3600 else int(seconds // 3600)
    return ngettext("%(n)s hour", "%(n)s hours", value) % {"n": value}


@register.filter
def limit(value):
    """A queue's global limit, or words for none."""
    return _("no limit") if value is None else value
