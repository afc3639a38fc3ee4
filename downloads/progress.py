"""How a download's live figures ride on its job row.

The engine's job row has a fraction, a phase and a 500-character message;
a download needs bytes, total, speed and ETA too. They travel as a small JSON
object in the message, so each progress report stays one guarded UPDATE of
the job (about one write a second per download) and reading them costs no
query beyond the job itself:

    job.progress          0..1, or None while the total is unknown
    job.phase             starting | downloading | postprocessing | editing | finishing | cached
    job.progress_message  {"b": bytes done, "t": total or null, "s": bytes/s or null, "e": eta s or null}
"""

import json
import math
from dataclasses import dataclass

KEYS = {"b": "bytes_done", "t": "bytes_total", "s": "speed_bytes_s", "e": "eta_s"}


@dataclass(frozen=True)
class Figures:
    bytes_done: int | None = None
    bytes_total: int | None = None
    speed_bytes_s: float | None = None
    eta_s: float | None = None


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(value, 1) if isinstance(value, float) else value


def encode(*, bytes_done=None, bytes_total=None, speed_bytes_s=None, eta_s=None):
    values = {"b": bytes_done, "t": bytes_total, "s": speed_bytes_s, "e": eta_s}
    return json.dumps({key: _number(value) for key, value in values.items()},
                      separators=(",", ":"))


def decode(message):
    """The figures in a job's progress message; empty figures for anything else."""
    if not message or not message.startswith("{"):
        return Figures()
    try:
        data = json.loads(message)
    except ValueError:
        return Figures()
    if not isinstance(data, dict):
        return Figures()
    return Figures(**{name: _number(data.get(key)) for key, name in KEYS.items()})


def describe(message):
    """The figures in words ("3.2 MB of 10.0 MB · 1.0 MB/s · 8 s left"), for staff's pages; a
    message that carries no figures as it is."""
    from django.template.defaultfilters import filesizeformat
    from django.utils.translation import gettext as _

    from downloads.templatetags.downloads_tags import seconds

    figures = decode(message)
    if figures == Figures():
        return message
    parts = []
    if figures.bytes_done is not None:
        done = filesizeformat(figures.bytes_done)
        parts.append(_("%(done)s of %(total)s") % {"done": done, "total": filesizeformat(
            figures.bytes_total)} if figures.bytes_total else done)
    if figures.speed_bytes_s:
        parts.append(_("%(speed)s/s") % {"speed": filesizeformat(figures.speed_bytes_s)})
    if figures.eta_s is not None:
        parts.append(_("%(eta)s left") % {"eta": seconds(figures.eta_s)})
    return " · ".join(parts)
