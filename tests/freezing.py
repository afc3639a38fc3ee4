"""Freezing a process (SIGSTOP) at a moment it holds no SQLite write lock.

SQLite keeps its write lock in the file system, so a process frozen inside a
write transaction stops every other writer until it wakes: no server can end
its session, as PostgreSQL does after `idle_in_transaction_session_timeout`
(docs/reliability.md). A test that freezes a worker to see what happens past
its lease wants it frozen between transactions; on PostgreSQL the process
holds no such lock and is frozen at the first try.
"""

import os
import signal
import time

from tests.proc import stopped


def write_locks(pid):
    """The POSIX write locks `pid` holds (/proc/locks): SQLite's write and checkpoint locks."""
    with open("/proc/locks") as f:
        return [line for line in f if line.split()[3:5] == ["WRITE", str(pid)]]


def freeze(pid, *, tries=500):
    """SIGSTOP `pid`, woken and stopped again until it is caught holding no write lock."""
    for _ in range(tries):
        os.kill(pid, signal.SIGSTOP)
        while not stopped(pid):  # a signal is delivered, not obeyed on the spot
            time.sleep(0.001)
        if not write_locks(pid):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"process {pid} held a write lock at each of {tries} tries")
