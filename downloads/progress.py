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
