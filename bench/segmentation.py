"""Segmentation speed as a multiple of real time, on a generated 10-minute 480p video.

    .venv/bin/python bench/segmentation.py [--downscale-to PX] [--regenerate]

The video (cached under the system temp folder) is 30 shots of 20 s each, cycling through
ffmpeg's synthetic sources (moving test patterns, colour bars, cellular automata, flat colours),
854x480 at 30 fps, H.264. Every shot boundary is a hard cut at a known frame, so the line
printed also says how many cuts were found within one frame of where they are.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from downloads import cv  # noqa: E402 (the path above makes the project importable)
from downloads.ffmpeg import locate  # noqa: E402

WIDTH_PX, HEIGHT_PX, FPS = 854, 480, 30
SHOT_S, SHOTS = 20, 30
# Cheap to render (mandelbrot and life were dropped: one renders at 3x real time, the other
# makes cuts inside its own shots), and each differs from the next at a glance.
SOURCES = (
    "testsrc2", "smptehdbars", "testsrc", "color=c=darkgreen", "rgbtestsrc",
    "color=c=orange", "pal100bars", "cellauto=rule=110", "testsrc2,hue=h=120", "yuvtestsrc",
)
CACHE = Path(tempfile.gettempdir()) / "haulage-bench" / f"shots-{WIDTH_PX}x{HEIGHT_PX}-{SHOTS}.mp4"


def generate(path):
    """Write the benchmark video to `path` (about 15 s with the ultrafast preset)."""
    inputs, chains = [], []
    for index in range(SHOTS):
        source, _, extra = SOURCES[index % len(SOURCES)].partition(",")
        joiner = ":" if "=" in source else "="
        inputs += ["-t", str(SHOT_S), "-f", "lavfi",
                   "-i", f"{source}{joiner}s={WIDTH_PX}x{HEIGHT_PX}:r={FPS}"]
        filters = ",".join(part for part in (extra, "setsar=1", "format=yuv420p") if part)
        chains.append(f"[{index}:v]{filters}[v{index}]")
    graph = ";".join(chains) + ";" + "".join(f"[v{i}]" for i in range(SHOTS))
    graph += f"concat=n={SHOTS}:v=1:a=0[v]"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.mp4")
    subprocess.run(
        [locate().ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *inputs,
         "-filter_complex", graph, "-map", "[v]", "-c:v", "libx264", "-preset", "ultrafast",
         "-pix_fmt", "yuv420p", str(partial)],
        check=True,
    )
    os.replace(partial, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--downscale-to", type=int, default=cv.DOWNSCALE_TO_PX,
                        help="width frames are shrunk to before comparison (0: full size)")
    parser.add_argument("--regenerate", action="store_true", help="rebuild the cached video")
    options = parser.parse_args()

    if options.regenerate or not CACHE.exists():
        started = time.perf_counter()
        generate(CACHE)
        print(f"generated {CACHE} in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    phase_started = {}

    def report(fraction, *, phase, message):
        phase_started.setdefault(phase, time.perf_counter())

    out_dir = Path(tempfile.mkdtemp(prefix="haulage-bench-"))
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        result = cv.segment(CACHE, out_dir=out_dir, report=report,
                            downscale_to=options.downscale_to or None)
        wall_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started  # all our threads; not ffmpeg's
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)

    expected = [index * SHOT_S * FPS for index in range(1, SHOTS)]
    found = [shot["start_frame"] for shot in result["shots"][1:]]
    near = sum(any(abs(frame - cut) <= 1 for frame in found) for cut in expected)
    exact = len(set(found) & set(expected))
    detect_s = phase_started.get("thumbnails", started + wall_s) - started
    print(
        f"- Segmentation: **{result['duration_s'] / wall_s:.1f}x real time** "
        f"({result['duration_s']:.0f} s of {result['width']}x{result['height']} "
        f"{result['fps']:g} fps H.264 in {wall_s:.1f} s: detection {detect_s:.1f} s, "
        f"thumbnails {wall_s - detect_s:.1f} s; {cpu_s:.1f} CPU-s on {os.cpu_count()} cores; "
        f"compared at {options.downscale_to or result['width']}+ px wide); "
        f"{len(result['shots'])} shots found, {SHOTS} made, "
        f"{near}/{len(expected)} cuts within ±1 frame ({exact} exact)"
    )


if __name__ == "__main__":
    main()
