"""The no-op job every peer runs, and the marks it leaves for the harness to read.

A mark is one line `label start finish` (wall-clock seconds) appended to a
file of the running process. The job's own timestamps, not the queue's
result rows, decide "first start" and "last finish", so every peer is timed
by the same clock and no peer's bookkeeping is trusted or queried.
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

MARKS_DIR_ENV = "BENCH_PEERS_MARKS_DIR"

_files = {}  # pid -> fd; per pid because some workers fork after importing this


def noop(label):
    """The job: record when it ran, do nothing else."""
    started = time.time()
    finished = time.time()
    pid = os.getpid()
    fd = _files.get(pid)
    if fd is None:
        path = Path(os.environ[MARKS_DIR_ENV]) / f"{pid}.marks"
        fd = _files[pid] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    # One write() of one short line on an O_APPEND file: lines from executor
    # threads never interleave, and nothing sits in a buffer when a worker is killed.
    os.write(fd, f"{int(label)} {started!r} {finished!r}\n".encode())


@dataclass(frozen=True)
class Mark:
    start: float
    finish: float


class MarkReader:
    """Follows the marks files of one directory as workers append to them."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.marks = {}  # label -> first Mark seen (a re-run keeps the first)
        self.runs = 0  # every mark, re-runs included
        self._offsets = {}

    def poll(self):
        for path in sorted(self.folder.glob("*.marks")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as file:
                file.seek(offset)
                data = file.read()
            # A line still being written has no newline yet: read it next time.
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[path] = offset + len(complete)
            for line in complete.decode().splitlines():
                label, start, finish = line.split()
                self.runs += 1
                self.marks.setdefault(int(label), Mark(float(start), float(finish)))

    def missing(self, labels):
        return [label for label in labels if label not in self.marks]

    def wait_for(self, labels, *, stall_timeout_s, alive, interval_s=0.1):
        """Wait until every label has a mark; fail after `stall_timeout_s` without a new mark."""
        labels = list(labels)
        seen, last_progress = -1, time.monotonic()
        while True:
            self.poll()
            missing = len(self.missing(labels))
            if missing == 0:
                return
            if len(self.marks) != seen:
                seen, last_progress = len(self.marks), time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise TimeoutError(
                    f"{missing} of {len(labels)} jobs did not run: no job started "
                    f"for {stall_timeout_s:g} s."
                )
            alive()
            time.sleep(interval_s)

    def span(self, labels):
        """(first start, last finish) among `labels`, wall-clock seconds."""
        marks = [self.marks[label] for label in labels]
        return min(mark.start for mark in marks), max(mark.finish for mark in marks)
