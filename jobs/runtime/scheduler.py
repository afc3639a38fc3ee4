"""The scheduler role: a django-q2 cluster that fires schedules, supervised by runworker.

django-q2 is used for its admin-editable schedules only. Every scheduled
function is short and enqueues Haulage jobs; the cluster (`manage.py
qcluster`) runs those firings. `runworker` starts one as a child process,
restarts it with a back-off if it dies, and stops it when it stops, so
`make run` stays one command. Several runworkers on several machines may each
run one: a schedule's row is locked while it fires, so it fires once per
period. `runworker --no-scheduler` leaves the role to a `qcluster` run apart. A project
without django-q2 has no schedules and no scheduler role. A schedule calls only a function
an app registered (jobs/schedules.py): the cluster refuses any other.

Parent side: `SchedulerRole`. Child side: `python -m jobs.runtime.scheduler <parent pid>`,
which asks the kernel for a signal when the supervising thread dies (a
SIGKILLed runworker), stops the cluster on it, and runs qcluster in its own session.
"""

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from jobs.runtime.process.parent import python_env

log = logging.getLogger("jobs.scheduler")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
OWNER_ENV = "HAULAGE_SCHEDULER_OF"  # the runworker's pid, so its cluster can be found in /proc
RESTART_DELAY_S = (1.0, 60.0)  # first and longest wait before starting a dead cluster again
STEADY_S = 60.0  # a cluster that ran this long died of something new: restart it at once


def available():
    """Whether the project installs django-q2: the engine runs without it, with no schedules."""
    from django.apps import apps

    return apps.is_installed("django_q")


class SchedulerRole:
    """Keep one `qcluster` child running from start() until stop()."""

    def __init__(self, *, stop_grace_s=10.0):
        self.stop_grace_s = stop_grace_s
        self.stopping = threading.Event()
        self.proc = None
        self.thread = None

    def start(self):
        # The supervising thread forks the cluster and lives until stop():
        # PR_SET_PDEATHSIG follows the forking *thread*, not the process.
        self.thread = threading.Thread(target=self._supervise, name="haulage-scheduler", daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            # TERM to the cluster's main process alone: it stops its sentinel,
            # which lets the firing in hand finish. Its processes share its
            # group, so a KILL after the grace takes them all.
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                log.warning("scheduler did not stop within %ss; killing it", self.stop_grace_s)
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        if self.thread is not None:
            self.thread.join(5)

    def _supervise(self):
        delay_s = RESTART_DELAY_S[0]
        while not self.stopping.is_set():
            started = time.monotonic()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jobs.runtime.scheduler", str(os.getpid())],
                env=python_env({OWNER_ENV: str(os.getpid())}),
                start_new_session=True,  # a terminal's Ctrl+C reaches runworker, which decides
            )
            log.info("scheduler started (pid %s)", self.proc.pid)
            code = self.proc.wait()
            # A cluster that died abruptly leaves its sentinel and workers behind
            # in its group; they would keep firing beside the next one.
            _signal_group(self.proc, signal.SIGKILL)
            if self.stopping.is_set():
                break
            if time.monotonic() - started > STEADY_S:
                delay_s = RESTART_DELAY_S[0]
            log.warning("scheduler exited with code %s; starting it again in %.0fs", code, delay_s)
            self.stopping.wait(delay_s)
            delay_s = min(delay_s * 2, RESTART_DELAY_S[1])


def _signal_group(proc, signum):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def main(argv):
    """Child side: die with the runworker that started us, then run the cluster."""
    parent = int(argv[1])
    forwarded = False

    def parent_gone(signum, frame):
        # The kernel may send the death signal once per thread of the dying
        # runworker, and django-q2's TERM handler is not re-entrant: pass on one.
        nonlocal forwarded
        if not forwarded:
            forwarded = True
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGHUP, parent_gone)
    with contextlib.suppress(Exception):  # Linux only; elsewhere stop() still stops us
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGHUP, 0, 0, 0)
    if os.getppid() != parent:
        return 0  # the parent died before the request took effect
    import django

    django.setup()
    from django.core.management import call_command

    call_command("qcluster")  # django.setup() loaded the guard (jobs.apps imports jobs.schedules)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
