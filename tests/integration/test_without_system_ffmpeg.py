"""The sample's journey on a machine with no system ffmpeg: imageio-ffmpeg's binary, no ffprobe.

A newcomer's machine has only what `make run` installs. The work runs in a real process whose
PATH is one folder of links to every program of this machine's PATH but ffmpeg and ffprobe, so
`downloads.ffmpeg.locate()` finds imageio-ffmpeg's binary there even where Debian's is installed.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import imageio_ffmpeg
import pytest

from tests.media import path_without_ffmpeg

# Processes and files only: the SQLite pass skips it.
pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parents[2]
SHOT_S = 1
CUTS_S = (1, 2, 3)
FPS = 25


def make_shots(ffmpeg, path):
    """Four one-second shots with hard cuts at 1, 2 and 3 s, and a tone throughout."""
    size = "320x240"
    subprocess.run([
        ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
        "-f", "lavfi", "-i", f"color=red:s={size}:d={SHOT_S}",
        "-f", "lavfi", "-i", f"testsrc=s={size}:d={SHOT_S}",
        "-f", "lavfi", "-i", f"color=blue:s={size}:d={SHOT_S}",
        "-f", "lavfi", "-i", f"smptebars=s={size}:d={SHOT_S}",
        "-f", "lavfi", "-i", f"sine=frequency=440:duration={4 * SHOT_S}",
        "-filter_complex", "[0:v][1:v][2:v][3:v]concat=n=4:v=1:a=0[v]", "-map", "[v]",
        "-map", "4:a", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest",
        str(path),
    ], check=True, stdin=subprocess.DEVNULL)


class EditProgress:
    """Receives an edit's reports as a job's context does, and keeps the fractions."""

    def __init__(self):
        self.fractions = []

    def alive(self):
        pass

    def progress(self, fraction=None, *, phase=None, message=None, force=False):
        self.fractions.append(fraction)


def edit(spec, source, staging):
    """Make the edit `spec` of `source` as an edit job's child does; what the output is."""
    from downloads import edits, ffmpeg

    staging.mkdir()
    argv, output, length_s, copied = edits.plan(edits.Edit.parse(spec), source,
                                                ffmpeg.probe(source), staging)
    progress = EditProgress()
    edits.run_ffmpeg(progress, argv, length_s, staging)
    probed = ffmpeg.probe(output)
    return {"copied": copied, "duration_s": probed["duration_s"],
            "streams": [stream["type"] for stream in probed["streams"]],
            "last_fraction": progress.fractions[-1] if progress.fractions else None}


def journey(folder):
    """Run in the process without ffmpeg on PATH: write what each step produced to outcome.json."""
    import django

    django.setup()
    from downloads import cv, demo, ffmpeg

    # The test means nothing if a system ffmpeg can still be found.
    assert shutil.which("ffmpeg") is None and shutil.which("ffprobe") is None
    tools = ffmpeg.locate()
    assert tools.ffprobe is None
    folder = Path(folder)
    video = folder / "shots.mp4"
    make_shots(tools.ffmpeg, video)
    sample = demo.generate(folder / "demo", width=160, height=120, shot_s=SHOT_S)
    outcome = {
        "ffmpeg": tools.ffmpeg,
        "segment": cv.segment(video, out_dir=folder / "segment"),
        "analyze": cv.analyze(video, start_s=2, end_s=3, out_dir=folder / "analyze"),
        "trim": edit("trim:1.500-3.500", video, folder / "trim"),
        "audio": edit("audio", video, folder / "audio"),
        "demo": ffmpeg.probe(sample / "sample.mp4"),
        "demo_segments": len(list((sample / "hls").glob("*.ts"))),
    }
    (folder / "outcome.json").write_text(json.dumps(outcome))


def test_shots_analysis_and_edits_work_with_imageio_ffmpeg_alone(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "IMAGEIO_FFMPEG_EXE"}
    env.update(PATH=path_without_ffmpeg(tmp_path / "bin"),
               DJANGO_SETTINGS_MODULE="project.settings")
    work = tmp_path / "work"
    work.mkdir()
    code = ("import sys; from tests.integration.test_without_system_ffmpeg import journey; "
            "journey(sys.argv[1])")
    done = subprocess.run([sys.executable, "-c", code, str(work)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    outcome = json.loads((work / "outcome.json").read_text())
    assert Path(imageio_ffmpeg.__file__).parent in Path(outcome["ffmpeg"]).parents

    shots = outcome["segment"]["shots"]
    assert len(shots) == 4
    for shot, cut_s in zip(shots[1:], CUTS_S, strict=True):
        assert abs(shot["start_frame"] - cut_s * FPS) <= 1
    for shot in shots:
        assert (work / "segment" / shot["thumbnail"]).read_bytes()[:3] == b"\xff\xd8\xff"

    blue = outcome["analyze"]  # the third shot: flat blue, still
    assert blue["frame_count"] == SHOT_S * FPS
    assert 0 < blue["brightness"] < 0.5 and blue["motion_mean"] < 0.001
    assert blue["colors"][0]["hex"][5:] >= "e0" and blue["colors"][0]["share"] > 0.95
    assert (work / "analyze" / blue["keyframe_strip"]).read_bytes()[:3] == b"\xff\xd8\xff"

    # Without ffprobe no keyframe can be found: a trim is re-encoded, from its exact frame.
    trim = outcome["trim"]
    assert trim["copied"] is False and sorted(trim["streams"]) == ["audio", "video"]
    assert trim["duration_s"] == pytest.approx(2.0, abs=0.1)
    assert trim["last_fraction"] == pytest.approx(1.0, abs=0.05)
    audio = outcome["audio"]
    assert audio["copied"] is True and audio["streams"] == ["audio"]
    assert audio["duration_s"] == pytest.approx(4 * SHOT_S, abs=0.1)

    assert outcome["demo"]["duration_s"] == pytest.approx(4 * SHOT_S, abs=0.1)
    assert outcome["demo_segments"] >= 1
