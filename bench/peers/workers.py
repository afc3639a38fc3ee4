"""Worker processes of a peer: started with its own command, stopped as a group."""

import os
import signal
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# The database is thrown away after each trial: a slow graceful stop buys nothing.
STOP_GRACE_S = 1


class WorkerDied(RuntimeError):
    """Every worker process exited while jobs were still waiting; its log says why."""


class Workers:
    """`count` worker processes of one peer, each in its own process group.

    Used as a context manager: leaving it stops them, whatever happened.
    """

    def __init__(self, peer, count, *, log_prefix):
        self.peer = peer
        self.count = count
        self.log_prefix = log_prefix
        self.processes = []
        self.logs = []

    def __enter__(self):
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        try:
            for index in range(self.count):
                log = Path(f"{self.log_prefix}-worker{index + 1}.log")
                self.logs.append(log)
                with log.open("wb") as output:
                    self.processes.append(subprocess.Popen(
                        self.peer.worker_argv(), cwd=REPO_ROOT, env=env,
                        stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                        # Own group: qcluster forks its pusher, monitor and workers,
                        # and all of them must go when we stop it.
                        start_new_session=True,
                    ))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def check_alive(self):
        if self.processes and all(process.poll() is not None for process in self.processes):
            tail = self.logs[0].read_text(errors="replace")[-2000:]
            raise WorkerDied(f"the worker processes exited; the end of {self.logs[0]}:\n{tail}")

    def __exit__(self, *exc_info):
        # A second Ctrl+C or the harness's TERM must not cut the stop short and
        # leave worker groups behind: hold both signals until every group is gone.
        held = {signum: signal.signal(signum, signal.SIG_IGN)
                for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._stop()
        finally:
            for signum, handler in held.items():
                signal.signal(signum, handler)

    def _stop(self):
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            # A graceful stop may leave forked children behind: the whole group goes.
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _signal_group(process, signum):
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
