"""Cancel latency of a supervised child: from the cancel request until no process of its job runs.

    .venv/bin/python bench/cancel_latency.py [--cancels 50] [--grace-s 5] [--poll-s 0.25]

Real children (tests/supervisor_children/family.py), each with a grandchild
in its group: one family obeys SIGTERM, the other ignores it. Two paths:

- watch: the engine's loop sees the request on its next poll
  (`should_stop`), then stops the child. The request lands at a random
  moment of a poll period, as a cancel from the database does.
- stop(): a listener thread calls `Child.stop()` directly.

The clock stops when `stop()` returns, which it does only once a scan of
/proc finds no running process of the job; the bench checks the reported
pids again itself. TERM-ignoring families take the whole grace each, so they
are cancelled in concurrent batches to keep the run short; that does not
change what bounds them. Prints a markdown table. No Django involved.
"""

import argparse
import math
import os
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobs.runtime.process import child as childside  # noqa: E402
from jobs.runtime.process.parent import (  # noqa: E402
    DEFAULT_KILL_GRACE_S,
    DEFAULT_POLL_INTERVAL_S,
    Child,
    WatchSettings,
    watch,
)
from tests.supervisor_children import argv  # noqa: E402


def start_family(folder: Path, *, ignore_term: bool) -> tuple[Child, Path]:
    fd, name = tempfile.mkstemp(dir=folder, prefix="pids-")
    os.close(fd)
    pids_file = Path(name)
    flags = ["--grandchild"] + (["--ignore-term"] if ignore_term else [])
    child = Child.spawn(argv("family", "--pids", str(pids_file), *flags), cwd=ROOT)
    deadline = time.monotonic() + 30
    # Cancel a family at work, not one still starting up.
    while len(pids_file.read_text().splitlines()) < 2:
        if child.poll() is not None or time.monotonic() > deadline:
            child.stop("requeued", grace_s=0)
            raise RuntimeError(f"A benchmark child did not start ({child.describe_exit()}).")
        time.sleep(0.01)
    return child, pids_file


def check_gone(pids_file: Path) -> None:
    for line in pids_file.read_text().splitlines():
        pid = int(line.split()[1])
        if childside.is_running(pid):
            raise RuntimeError(f"Process {pid} outlived its job's cancel.")


def cancel_via_watch(child: Child, settings: WatchSettings) -> float:
    requested = threading.Event()
    ended = {}

    def supervise():
        watch(child, settings,
              should_stop=lambda: "cancelled" if requested.is_set() else None)
        ended["at"] = time.monotonic()

    thread = threading.Thread(target=supervise)
    thread.start()
    time.sleep(random.uniform(0, settings.poll_interval_s))
    requested_at = time.monotonic()
    requested.set()
    thread.join()
    return ended["at"] - requested_at


def cancel_directly(child: Child, settings: WatchSettings) -> float:
    requested_at = time.monotonic()
    child.stop("cancelled", settings.kill_grace_s)
    return time.monotonic() - requested_at


def measure(cancel, *, cancels: int, batch: int, ignore_term: bool,
            settings: WatchSettings, folder: Path) -> list[float]:
    latencies_s: list[float] = []
    while len(latencies_s) < cancels:
        size = min(batch, cancels - len(latencies_s))
        families: list[tuple[Child, Path]] = []
        try:
            for _ in range(size):
                families.append(start_family(folder, ignore_term=ignore_term))
            with ThreadPoolExecutor(max_workers=size) as pool:
                results = list(pool.map(lambda family: cancel(family[0], settings), families))
        finally:
            # Nothing outlives a failed run (a no-op for the families cancelled).
            for child, _ in families:
                child.stop("requeued", grace_s=0)
        for _, pids_file in families:
            check_gone(pids_file)
        latencies_s.extend(results)
    return latencies_s


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cancels", type=int, default=50, help="per row (default 50)")
    parser.add_argument("--grace-s", type=float, default=DEFAULT_KILL_GRACE_S)
    parser.add_argument("--poll-s", type=float, default=DEFAULT_POLL_INTERVAL_S)
    parser.add_argument("--batch", type=int, default=10,
                        help="TERM-ignoring families cancelled at once (default 10)")
    args = parser.parse_args()
    settings = WatchSettings(kill_grace_s=args.grace_s, poll_interval_s=args.poll_s)

    print(f"Cancel latency, {args.cancels} cancels per row, grace {args.grace_s:g} s, "
          f"poll {args.poll_s:g} s: request -> no process of the job running.\n")
    print("| family | path | p50 | p95 | max |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="haulage-bench-") as folder:
        for ignore_term, label in [(False, "obeys TERM"), (True, "ignores TERM")]:
            for cancel, path in [(cancel_via_watch, "watch (polled)"),
                                 (cancel_directly, "stop() directly")]:
                latencies_s = measure(
                    cancel, cancels=args.cancels, batch=args.batch if ignore_term else 1,
                    ignore_term=ignore_term, settings=settings, folder=Path(folder),
                )
                print(f"| child + grandchild, {label} | {path} | "
                      f"{percentile(latencies_s, 0.5) * 1000:.0f} ms | "
                      f"{percentile(latencies_s, 0.95) * 1000:.0f} ms | "
                      f"{max(latencies_s) * 1000:.0f} ms |", flush=True)
    print(f"\nBounds: a polled request waits up to one poll ({args.poll_s:g} s) to be seen; "
          f"a family that obeys TERM is then gone in milliseconds; one that ignores it "
          f"lives for the whole kill grace ({args.grace_s:g} s) before SIGKILL.")


if __name__ == "__main__":
    main()
