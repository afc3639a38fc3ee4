"""`make bench`: Haulage's figures, each benchmark in its own process, in one report.

    .venv/bin/python bench/run.py [--quick]

Every part starts what it needs (a throw-away PostgreSQL, Redis, a loopback
HTTP origin) and prints a markdown table; this collects them into
var/bench/latest.md. The peers' side-by-side figures are `make bench-peers`.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PARTS = [
    # (title, argv after the interpreter, what --quick adds)
    ("Queue throughput and latency (the peers' method, Haulage only)",
     ["-m", "bench.peers", "--systems", "haulage"], ["--quick"]),
    ("Claim cost against queue depth, and head-of-line blocking", ["bench/engine.py"], ["--quick"]),
    ("Rate limits: observed starts against the configured rate", ["bench/rates.py"], ["--quick"]),
    ("Many workers through PgBouncer", ["bench/pgbouncer.py"], ["--quick"]),
    ("Cancel latency of process-mode jobs", ["bench/cancel_latency.py"], []),
    ("Shot segmentation", ["bench/segmentation.py"], []),
    ("CV transport through Redis", ["bench/cv_transport.py"], []),
    ("Downloads", ["bench/downloads.py"], ["--quick"]),
    ("Shot notes: click to notes shown", ["bench/shot_notes.py"], ["--quick"]),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, one repetition")
    parser.add_argument("--only", default="", help="run only parts whose title contains this")
    args = parser.parse_args()
    out = ROOT / "var" / "bench" / "latest.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    sections, failed = [], []
    for title, argv, quick in PARTS:
        if args.only and args.only.lower() not in title.lower():
            continue
        if not (ROOT / argv[0]).exists() and argv[0] != "-m":
            continue
        print(f"## {title}", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, *argv, *(quick if args.quick else [])], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)},
                                capture_output=True, text=True)
        took = time.monotonic() - started
        table = "\n".join(line for line in result.stdout.splitlines()
                          if line.startswith(("|", "-", "*")) or not line.strip())
        if result.returncode != 0:
            failed.append(title)
            table = f"(failed with exit code {result.returncode})\n\n```\n{result.stderr[-2000:]}\n```"
        section = f"## {title}\n\n{table.strip()}\n\n_{took:.0f} s_\n"
        print(section, flush=True)
        sections.append(section)
    out.write_text("# Haulage benchmark\n\n" + "\n".join(sections))
    print(f"written to {out.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
