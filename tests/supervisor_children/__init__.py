"""Tiny programs that the supervisor tests run as real child processes.

Each reports the pids of its processes to a file given with --pids, one
"role pid" line each, so a test can check they are gone.
"""

import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def report(path: str, role: str) -> None:
    # O_APPEND: several processes of one family write the same file.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{role} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def argv(module: str, *args: str) -> list[str]:
    """The command line that runs tests/supervisor_children/<module>.py."""
    return [sys.executable, "-m", f"tests.supervisor_children.{module}", *args]
