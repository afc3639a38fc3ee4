"""Finding a chaos run's processes in /proc, by the run id every one of them inherits.

Other test runs share this machine, so nothing here touches a process that
does not carry this run's id in its environment; a signal goes through a
pidfd opened after that check, so a recycled pid is never hit.
"""

import os
import signal

from jobs.runtime.process.child import MARKER_ENV, is_running
from tests.proc import read_stat


def environ(pid):
    """The environment `pid` started with, or None when it is gone or not readable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    pairs = (item.partition(b"=") for item in data.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _pids():
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me]


def of_run(variable, run_id):
    """[(pid, job marker or "")] of running processes carrying `variable`=`run_id`."""
    found = []
    for pid in _pids():
        env = environ(pid)
        if env and env.get(variable) == run_id and is_running(pid):
            found.append((pid, env.get(MARKER_ENV, "")))
    return found


def carrying(variable, run_id, markers):
    """[(pid, marker)] of this run's running processes whose job marker is in `markers`."""
    markers = set(markers)
    return [(pid, marker) for pid, marker in of_run(variable, run_id) if marker in markers]


def children(variable, run_id, parents):
    """[(pid, marker)] of this run's job processes whose parent is one of `parents`."""
    found = []
    for pid, marker in of_run(variable, run_id):
        stat = read_stat(pid)
        if marker and stat is not None and stat[1] in parents:
            found.append((pid, marker))
    return found


def kill_if_of_run(pid, variable, run_id, signum=signal.SIGKILL):
    """Send `signum` to `pid` only if it is still a process of this run; True if sent."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        # Checked after the pidfd pinned the process: the check is about that process.
        env = environ(pid)
        if not env or env.get(variable) != run_id:
            return False
        signal.pidfd_send_signal(pidfd, signum)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)
