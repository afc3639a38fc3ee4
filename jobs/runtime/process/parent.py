"""The parent side of the `process` execution mode: spawn, watch and stop a job's child.

The life of one child, as the worker runs it::

    child = Child.spawn([sys.executable, "-m", "jobs.runtime.process.main", job_id, token], marker=token)
    outcome = watch(child, WatchSettings(stall_timeout_s=120), should_stop=engine_reason)
    # outcome.reason / outcome.error_code / outcome.describe() go on the job row.

Glossary: the *child* is the process we start, leader of its own session and
process group; its *group* is that process group; an *escapee* is a process
of the job outside the group (it called setsid), found through the child's
tree (the child is a subreaper) or the job's *marker* in its environment.

Rules that keep a stop from hurting anyone else:

- The child is never reaped until everything of the job is gone. Its zombie
  keeps the pid, and so the group id, from being reused, so `os.killpg` on
  the group can only reach the job. `poll()` looks with WNOWAIT for that
  reason; nothing else in the worker may wait for children it did not start
  (no ``os.wait()``, no SIGCHLD set to SIG_IGN).
- An escapee is signalled through a pidfd, after re-checking it belongs to
  the job, so a recycled pid is never hit.
- After the reap nothing is signalled again: `stop()` is idempotent and
  returns the first outcome.

The parent-alive pipe works only if no other process holds its write end:
the child is exec'd with every other fd closed (database sockets included),
and the worker must not fork without exec (multiprocessing's "fork"), since
such a copy would keep the write end open after the worker died.

Cancel latency (bench/cancel_latency.py) is one poll interval to see a
polled request, plus the TERM handling of the job's processes, or the whole
kill grace for a process that ignores TERM. A caller that learns of a
cancel by notification calls `child.stop()` directly and skips the poll.

The child's side of the protocol (pipes, marker, limits, exit codes) is in
`jobs.runtime.process.child`. Linux only (pidfds, /proc).
"""

import os
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from jobs.runtime.process.child import (
    LIMITS_ENV,
    LIVENESS_FD_ENV,
    MARKER_ENV,
    PARENT_FD_ENV,
    Limits,
    job_processes,
    limit_hit,
    pin_if_ours,
    still_in_job,
)

__all__ = [
    "Child", "ExitStatus", "Limits", "StopOutcome", "StopReason", "WatchSettings",
    "python_env", "watch", "why_stop",
]

DEFAULT_STALL_TIMEOUT_S = 60.0
DEFAULT_WALL_CLOCK_CAP_S = 6 * 3600.0
DEFAULT_KILL_GRACE_S = 5.0
DEFAULT_POLL_INTERVAL_S = 0.25

# How often stop() scans /proc again while waiting for the job's processes to
# go; an exit of a process it has seen wakes it at once.
STOP_STEP_S = 0.05
# How long stop() waits after SIGKILL before reporting survivors (a process
# in uninterruptible sleep, e.g. on a dead NFS mount, dies only when it wakes).
KILL_WAIT_S = 5.0


class StopReason(StrEnum):
    """The watchdog's own reasons to stop a child (crashed, stalled and timeout are Outcome words
    too; exited and abandoned are the watchdog's own).

    A caller's reasons come from its `should_stop` and are passed through as given.
    """

    EXITED = "exited"  # it ended on its own with exit code 0
    CRASHED = "crashed"  # it ended on its own otherwise (exit code N / signal S)
    STALLED = "stalled"  # no sign of life for the stall timeout
    TIMEOUT = "timeout"  # past the wall-clock cap
    ABANDONED = "abandoned"  # the watch loop itself failed: a child never runs unwatched


@dataclass(frozen=True)
class WatchSettings:
    """The watchdog's knobs for one kind; the engine fills them from its settings."""

    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    wall_clock_cap_s: float = DEFAULT_WALL_CLOCK_CAP_S
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S


@dataclass(frozen=True)
class ExitStatus:
    """How the child process itself ended; both None when someone else reaped it."""

    code: int | None = None
    signal: int | None = None

    def describe(self) -> str:
        if self.code is not None:
            return f"exit code {self.code}"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                return f"signal {self.signal}"
            return f"signal {self.signal} ({name})"
        return "unknown exit status (reaped elsewhere)"


@dataclass(frozen=True)
class StopOutcome:
    """What `Child.stop` did and how the job's processes ended."""

    reason: str  # a StopReason value
    # "exit": nothing was left to stop; "term": all gone within the grace;
    # "kill": SIGKILL was needed.
    ended_by: str
    status: ExitStatus | None  # the child's own; None while it survives
    limit: str | None  # "cpu_time" | "file_size" | "address_space" when a limit ended it
    killed_pids: tuple[int, ...]  # every process SIGKILL was aimed at
    swept_pids: tuple[int, ...]  # escapees signalled one by one
    survivors: tuple[int, ...]  # still running after KILL_WAIT_S; stop() again to retry
    elapsed_s: float  # from the stop request until the last process was gone

    @property
    def error_code(self) -> str:
        """The code to record: "resource_limit" when a limit ended the child, else the reason."""
        return "resource_limit" if self.limit else str(self.reason)

    def describe(self) -> str:
        status = self.status.describe() if self.status else "still running"
        if self.limit:
            return f"resource_limit: {self.limit} ({status})"
        return f"{self.reason}: {status}"


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for `python -m <this package's module>` as a child of this process.

    It gets the folders of this process's import path that the interpreter
    does not add by itself (the project's, where our settings module named by
    DJANGO_SETTINGS_MODULE lives), so it imports what we import wherever we
    were started from, and nothing of another checkout.
    """
    own = (sys.prefix, sys.base_prefix)
    path = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    path = [entry for entry in dict.fromkeys(path) if not entry.startswith(own)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **(extra or {})}


class Child:
    """A supervised child process and everything it starts. Create with `spawn`.

    Thread-safe: the watch loop, a shutdown path and a cancel listener may all
    call `stop()`; the first does the work, the others get its outcome.
    """

    def __init__(self, popen: subprocess.Popen, *, marker: str, limits: Limits,
                 liveness_fd: int, parent_alive_fd: int):
        self._popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session: the leader of its own group
        self.marker = marker
        self.limits = limits
        self.started_monotonic = time.monotonic()
        self._last_alive = self.started_monotonic  # spawning counts as alive
        self._pidfd = os.pidfd_open(self.pid)
        self._liveness_fd: int | None = liveness_fd
        self._parent_alive_fd: int | None = parent_alive_fd
        self._status: ExitStatus | None = None
        self._reaped = False
        self._outcome: StopOutcome | None = None
        self._stop_lock = threading.Lock()
        # Guards the fds: closing one while another thread reads it could
        # make that thread read whatever file reuses the number.
        self._fd_lock = threading.Lock()

    @classmethod
    def spawn(cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None, marker: str | None = None,
              limits: Limits | None = None, stdout=None, stderr=None) -> "Child":
        """Start `argv` in a new session with the liveness and parent-alive pipes.

        `env` defaults to this process's environment; the protocol variables
        are added to it. `marker` must be unique to this run of the job (a
        random one is made when omitted). `stdout`/`stderr` are as for Popen;
        stdin is /dev/null.
        """
        marker = marker or secrets.token_hex(16)
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{8,128}", marker):
            raise ValueError("A job marker must be 8-128 letters, digits or '_.:-'.")
        limits = limits or Limits()
        # os.pipe() fds are close-on-exec: only this child gets its ends (via
        # pass_fds), so the parent's death closes the last write end it sees.
        liveness_r, liveness_w = os.pipe()
        parent_r, parent_w = os.pipe()
        os.set_blocking(liveness_r, False)
        child_env = {k: v for k, v in (os.environ if env is None else env).items()
                     if k != LIMITS_ENV}
        child_env.update({
            LIVENESS_FD_ENV: str(liveness_w), PARENT_FD_ENV: str(parent_r), MARKER_ENV: marker,
        })
        if limits:
            child_env[LIMITS_ENV] = limits.to_env()
        try:
            popen = subprocess.Popen(
                list(argv), env=child_env, cwd=cwd, start_new_session=True,
                pass_fds=(liveness_w, parent_r), stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=stderr,
            )
        except BaseException:
            os.close(liveness_r)
            os.close(parent_w)
            raise
        finally:
            os.close(liveness_w)
            os.close(parent_r)
        try:
            child = cls(popen, marker=marker, limits=limits, liveness_fd=liveness_r,
                        parent_alive_fd=parent_w)
        except BaseException:
            # No pidfd (out of fds): a child we cannot supervise must not run.
            popen.kill()
            popen.wait()
            os.close(liveness_r)
            os.close(parent_w)
            raise
        if limits:
            # A Python child applies them itself in bootstrap() before any
            # work; this covers a program that never bootstraps, a moment
            # after its exec.
            try:
                limits.apply(child.pid)
            except ProcessLookupError:
                pass
        return child

    def __repr__(self) -> str:
        return f"<Child pid={self.pid} marker={self.marker}>"

    # --- Looking ------------------------------------------------------------

    def seconds_since_alive(self) -> float:
        """Seconds since the last sign of life (or the spawn), after draining the pipe."""
        with self._fd_lock:
            self._drain_liveness()
            return time.monotonic() - self._last_alive

    def poll(self) -> ExitStatus | None:
        """The child's exit status once it has ended, else None. Never reaps it."""
        if self._status is not None:
            return self._status
        with self._fd_lock:
            if self._status is not None or self._pidfd is None:
                return self._status
            try:
                info = os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                # Reaped behind our back: the group id is no longer reserved
                # for us, so from now on only verified pids are signalled.
                self._reaped = True
                self._status = ExitStatus()
                return self._status
        if info is None:
            return None
        if info.si_code == os.CLD_EXITED:
            self._status = ExitStatus(code=info.si_status)
        else:
            self._status = ExitStatus(signal=info.si_status)
        return self._status

    def describe_exit(self) -> str | None:
        """"exit code N" or "signal S (SIGNAME)" once the child has ended, else None."""
        status = self.poll()
        return status.describe() if status else None

    def wait(self, timeout_s: float) -> ExitStatus | None:
        """Wait up to `timeout_s` for the child to end, reading signs of life as they come.

        Reading them as they arrive (rather than once per poll) keeps
        `seconds_since_alive` exact, so a stall is seen within stall + poll.
        """
        deadline = time.monotonic() + timeout_s
        while (status := self.poll()) is None:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return None
            with self._fd_lock:
                fds = [fd for fd in (self._pidfd, self._liveness_fd) if fd is not None]
            if not fds:
                return None
            try:
                ready, _, _ = select.select(fds, [], [], remaining_s)
            except (OSError, ValueError):
                # stop() closed an fd under us: it is ending the child anyway.
                continue
            if self._liveness_fd in ready:
                with self._fd_lock:
                    self._drain_liveness()
        return status

    def processes(self, *, strangers: set | None = None) -> dict[int, str]:
        """The job's running processes now (pid -> "group" | "tree" | "marker").

        `strangers` is `job_processes`'s cache for a caller that asks again and again.
        """
        if self._reaped:
            # The pid and group id may belong to strangers now: the marker only.
            return job_processes(root_pid=-1, pgid=-1, marker=self.marker, strangers=strangers)
        return job_processes(root_pid=self.pid, pgid=self.pgid, marker=self.marker,
                             strangers=strangers)

    # --- Stopping -----------------------------------------------------------

    def stop(self, reason: str, grace_s: float = DEFAULT_KILL_GRACE_S) -> StopOutcome:
        """End every process of the job and reap the child; safe to call again.

        SIGTERM (and SIGCONT, so a frozen process can act on it) to the group
        and escapees; wait up to `grace_s` for all to go; then SIGKILL until
        none is left; then reap. A child that had already ended only has its
        leftovers stopped and is reaped.
        """
        with self._stop_lock:
            if self._outcome is not None:
                return self._outcome
            started = time.monotonic()
            killed: set[int] = set()
            swept: set[int] = set()
            with _Sighting(self) as sighting:
                found = sighting.look()
                ended_by = "exit"
                if found:
                    ended_by = "term"
                    swept |= sighting.signal(found, signal.SIGTERM)
                    swept |= sighting.signal(found, signal.SIGCONT)
                    found = sighting.wait_gone(until=started + grace_s)
                if found:
                    ended_by = "kill"
                    kill_deadline = time.monotonic() + KILL_WAIT_S
                    while found:
                        killed.update(found)
                        swept |= sighting.signal(found, signal.SIGKILL)
                        found = sighting.wait_gone(
                            until=min(time.monotonic() + 2 * STOP_STEP_S, kill_deadline))
                        if time.monotonic() >= kill_deadline:
                            break
            elapsed_s = time.monotonic() - started
            status = self.poll()
            if status is not None and self.pid not in found:
                self._reap()
            outcome = StopOutcome(
                reason=str(reason), ended_by=ended_by, status=status,
                limit=limit_hit(code=status.code, signal_number=status.signal)
                if status and self.limits else None,
                killed_pids=tuple(sorted(killed)), swept_pids=tuple(sorted(swept)),
                survivors=tuple(sorted(found)), elapsed_s=elapsed_s,
            )
            if not found:
                self._outcome = outcome
            return outcome

    def _reap(self) -> None:
        if not self._reaped:
            self._popen.wait()
            self._reaped = True
        elif self._popen.returncode is None:
            # Reaped elsewhere; tell Popen so it does not warn about a running child.
            self._popen.returncode = -1
        with self._fd_lock:
            for name in ("_liveness_fd", "_parent_alive_fd", "_pidfd"):
                fd = getattr(self, name)
                if fd is not None:
                    os.close(fd)
                    setattr(self, name, None)

    def _drain_liveness(self) -> None:
        # Caller holds _fd_lock.
        while self._liveness_fd is not None:
            try:
                data = os.read(self._liveness_fd, 65536)
            except BlockingIOError:
                return
            if not data:
                # Every writer is gone (the child ended or closed it): no
                # sign of life can come, so stop watching the fd.
                os.close(self._liveness_fd)
                self._liveness_fd = None
                return
            self._last_alive = time.monotonic()


class _Sighting:
    """The job's processes as one stop() sees them, each pinned by a pidfd once seen.

    Pinning at first sight matters: once the child (the subreaper) is dead,
    a daemon that scrubbed its environment is no longer in anyone's tree, and
    its pid could be recycled; the pidfd still reaches exactly that process.
    """

    def __init__(self, child: Child):
        self.child = child
        self.pins: dict[int, int] = {}  # pid -> pidfd; the child itself has its own
        self.strangers: set = set()  # see job_processes

    def __enter__(self) -> "_Sighting":
        return self

    def __exit__(self, *exc_info) -> None:
        for pidfd in self.pins.values():
            os.close(pidfd)

    def look(self) -> dict[int, str]:
        """Running processes of the job: the scan's, plus pinned ones it no longer sees."""
        child = self.child
        found = child.processes(strangers=self.strangers)
        pgid = -1 if child._reaped else child.pgid
        known = set(found) | ({child.pid} if not child._reaped else set())
        for pid in found.keys() - {child.pid}:
            if pid in self.pins and not _has_exited(self.pins[pid]):
                continue
            if pid in self.pins:
                # Ours died and the number came back, to the job again.
                os.close(self.pins.pop(pid))
            pidfd = pin_if_ours(pid, lambda p: still_in_job(
                p, pgid=pgid, known=known, marker=child.marker))
            if pidfd is not None:
                self.pins[pid] = pidfd
        for pid, pidfd in self.pins.items():
            if pid not in found and not _has_exited(pidfd):
                found[pid] = "pinned"
        if not child._reaped and child.poll() is None:
            # Its exit is what waitid says, not /proc: the main thread of a
            # process shows "Z" while its other threads are still ending.
            found.setdefault(child.pid, "group")
        return found

    def signal(self, found: dict[int, str], signum: int) -> set[int]:
        """Signal the job; return the pids signalled one by one (the escapees)."""
        child = self.child
        signalled = set()
        # Escapees first: while the child lives, their tree still leads to it.
        for pid, how in found.items():
            if (how == "group" and not child._reaped) or pid not in self.pins:
                continue
            try:
                signal.pidfd_send_signal(self.pins[pid], signum)
                signalled.add(pid)
            except ProcessLookupError:
                pass
        if not child._reaped:
            # Safe: our unreaped child holds the group id (module docstring).
            try:
                os.killpg(child.pgid, signum)
            except ProcessLookupError:
                pass
        return signalled

    def wait_gone(self, *, until: float) -> dict[int, str]:
        """Wait until nothing of the job runs or `until` passes; return what still runs.

        Wakes the moment any process seen exits (its pidfd turns readable),
        and looks again every STOP_STEP_S for processes started meanwhile.
        """
        child = self.child
        while found := self.look():
            remaining_s = until - time.monotonic()
            if remaining_s <= 0:
                break
            pidfds = [self.pins[pid] for pid in found if pid in self.pins]
            if child.poll() is None:
                pidfds.append(child._pidfd)
            select.select(pidfds, [], [], min(STOP_STEP_S, remaining_s))
        return found


def _has_exited(pidfd: int) -> bool:
    # A pidfd turns readable when its process has exited.
    return bool(select.select([pidfd], [], [], 0)[0])


def why_stop(child: Child, *, stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
             wall_clock_cap_s: float = DEFAULT_WALL_CLOCK_CAP_S,
             started_monotonic: float | None = None) -> StopReason | None:
    """The watchdog's verdict now: exited, crashed, timeout, stalled, or None to go on.

    The engine's own reasons (cancelled, paused, requeued, lease_lost) come
    from its database; `watch` asks for them through `should_stop`.
    """
    status = child.poll()
    if status is not None:
        return StopReason.EXITED if status.code == 0 else StopReason.CRASHED
    started = child.started_monotonic if started_monotonic is None else started_monotonic
    if time.monotonic() - started >= wall_clock_cap_s:
        return StopReason.TIMEOUT
    if child.seconds_since_alive() >= stall_timeout_s:
        return StopReason.STALLED
    return None


def watch(child: Child, settings: WatchSettings = WatchSettings(), *,
          should_stop: Callable[[], str | None] | None = None) -> StopOutcome:
    """Watch `child` until a reason to stop appears, stop it, and return the outcome.

    `should_stop` is polled every `settings.poll_interval_s` for the engine's
    reasons. An end of the child wins over it, and it over the timeout and
    the stall. Another thread may also call `child.stop()` directly for a
    faster cancel; this loop then returns that outcome. If this loop fails,
    the child is stopped for "abandoned" (`StopReason.ABANDONED`): it must never run unwatched.
    """
    try:
        while True:
            reason = None
            if child.poll() is None and should_stop is not None:
                reason = should_stop()
            reason = reason or why_stop(
                child, stall_timeout_s=settings.stall_timeout_s,
                wall_clock_cap_s=settings.wall_clock_cap_s,
            )
            if reason:
                return child.stop(reason, settings.kill_grace_s)
            child.wait(settings.poll_interval_s)
    except BaseException:
        child.stop(StopReason.ABANDONED, settings.kill_grace_s)
        raise
