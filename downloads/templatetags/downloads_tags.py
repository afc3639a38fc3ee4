from django import template
from django.utils.translation import gettext as _

register = template.Library()


@register.filter
def seconds(value):
    """A duration a person reads at a glance: "45 s", "3 min 20 s", "1 h 05 min"."""
    if value is None or value == "":
        return ""
    total = int(round(float(value)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return _("%(h)d h %(m)02d min") % {"h": hours, "m": minutes}
    if minutes:
        return _("%(m)d min %(s)02d s") % {"m": minutes, "s": secs}
    return _("%(s)d s") % {"s": secs}


@register.filter
def timecode(value):
    """Seconds as m:ss.t for a position in a video."""
    if value is None:
        return ""
    value = float(value)
    minutes, secs = divmod(value, 60)
    return f"{int(minutes)}:{secs:04.1f}"


@register.filter
def sparkline(series, size="120x32"):
    """SVG polyline points for [[t, value], ...], scaled into a width x height box."""
    if not series:
        return ""
    width, height = (int(n) for n in size.split("x"))
    times = [point[0] for point in series]
    top = max(point[1] for point in series) or 1.0
    span = (times[-1] - times[0]) or 1.0
    return " ".join(
        f"{(t - times[0]) / span * width:.1f},{height - value / top * (height - 2) - 1:.1f}"
        for t, value in series)


@register.filter
def percent(value):
    return "" if value is None else f"{float(value) * 100:.0f}%"
