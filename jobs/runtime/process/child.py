"""What runs inside a supervised child: signs of life, the parent-death watch, limits.

A child started by `jobs.runtime.process.parent.Child.spawn` calls `bootstrap()` first (or
hands its main function to `run()`, which does that and maps a hit resource
limit to a documented exit code). The module imports nothing but the standard
library, so a child can bootstrap before Django is set up.

The protocol between the two sides, all through the child's environment:

``HAULAGE_LIVENESS_FD``
    Write end of the liveness pipe. `alive()` writes one byte, at most
    `ALIVE_EVERY_S` apart; the parent only cares *when* bytes last arrived.
``HAULAGE_PARENT_FD``
    Read end of the parent-alive pipe. The parent never writes; when it dies
    the kernel closes the write end, the read here returns EOF and the child
    kills every process of its job, itself last, writing nothing more.
``HAULAGE_JOB_MARKER``
    A token unique to this run of the job. It is inherited by every
    descendant, so a process that left the process group (`setsid`) is still
    found by scanning ``/proc/*/environ`` (see `job_processes`).
``HAULAGE_LIMITS``
    Resource limits, e.g. ``data=1073741824,fsize=1048576,cpu=30`` (`Limits`).

How a hit limit shows in the child's exit status (`limit_hit` reads it back):

==================  ==========================================================
limit               the leader ends with
==================  ==========================================================
CPU time            signal SIGXCPU (a program that catches or ignores it gets
                    SIGKILL one second later, reported as a plain signal)
file size           exit code `EXIT_FILE_SIZE` from `run()` (Python ignores
                    SIGXFSZ and raises EFBIG); signal SIGXFSZ from a program
                    that does not ignore it
memory (as, data)   exit code `EXIT_ADDRESS_SPACE` from `run()` (MemoryError)
==================  ==========================================================
"""

import contextlib
import ctypes
import errno
import os
import resource
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

LIVENESS_FD_ENV = "HAULAGE_LIVENESS_FD"
PARENT_FD_ENV = "HAULAGE_PARENT_FD"
MARKER_ENV = "HAULAGE_JOB_MARKER"
LIMITS_ENV = "HAULAGE_LIMITS"

# Outside 1-2 (Python's own), 126-127 (the shell's) and 128+N (a shell's
# report of signal N), so a limit cannot be mistaken for an ordinary failure.
EXIT_ADDRESS_SPACE = 121
EXIT_FILE_SIZE = 122

# Throttle for alive(): a hot loop may call it every iteration.
ALIVE_EVERY_S = 0.25

# CPU-time hard limit = soft + this: SIGXCPU at the soft one, SIGKILL at the
# hard one, for a program that catches SIGXCPU.
CPU_HARD_EXTRA_S = 1

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


# --- Resource limits ---------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """Per-kind resource limits for a child and everything it starts; None is no limit.

    Every limit is per process (rlimits are inherited, not shared): a child
    with a 30 s CPU limit may start an ffmpeg that also gets 30 s. Address
    space counts reservations, not use: thread stacks and libraries such as
    OpenCV map far more than they touch, so size it from a real run. Data
    (RLIMIT_DATA) counts only private writable memory (heap, anonymous maps,
    thread stacks): the closer bound on what a process really uses.
    """

    address_space_bytes: int | None = None
    data_bytes: int | None = None
    file_size_bytes: int | None = None
    cpu_time_s: int | None = None

    _KEYS = (("as", "address_space_bytes"), ("data", "data_bytes"), ("fsize", "file_size_bytes"),
             ("cpu", "cpu_time_s"))

    def __bool__(self) -> bool:
        return any(getattr(self, field) is not None for _, field in self._KEYS)

    def to_env(self) -> str:
        return ",".join(
            f"{key}={getattr(self, field)}"
            for key, field in self._KEYS
            if getattr(self, field) is not None
        )

    @classmethod
    def from_env(cls, text: str) -> "Limits":
        fields = dict(cls._KEYS)
        values = {}
        for item in filter(None, text.split(",")):
            key, _, value = item.partition("=")
            if key not in fields or not value.isdigit():
                raise ValueError(f"{LIMITS_ENV} has a malformed item {item!r}.")
            values[fields[key]] = int(value)
        return cls(**values)

    def rlimits(self) -> list[tuple[int, tuple[int, int]]]:
        """The (resource, (soft, hard)) pairs to set; no core files when any limit is set."""
        pairs = []
        if self.address_space_bytes is not None:
            pairs.append((resource.RLIMIT_AS, (self.address_space_bytes,) * 2))
        if self.data_bytes is not None:
            pairs.append((resource.RLIMIT_DATA, (self.data_bytes,) * 2))
        if self.file_size_bytes is not None:
            pairs.append((resource.RLIMIT_FSIZE, (self.file_size_bytes,) * 2))
        if self.cpu_time_s is not None:
            soft = self.cpu_time_s
            pairs.append((resource.RLIMIT_CPU, (soft, soft + CPU_HARD_EXTRA_S)))
        if pairs:
            # SIGXCPU and SIGXFSZ dump core by default: a job hitting its limit
            # must not leave a core file the size of its memory behind.
            pairs.append((resource.RLIMIT_CORE, (0, 0)))
        return pairs

    def apply(self, pid: int = 0) -> None:
        """Set the limits on process `pid` (0: this one)."""
        for which, values in self.rlimits():
            resource.prlimit(pid, which, values)


def limit_hit(*, code: int | None, signal_number: int | None) -> str | None:
    """Which limit an exit status reports, per the table in this module's docstring."""
    if signal_number == signal.SIGXCPU:
        return "cpu_time"
    if signal_number == signal.SIGXFSZ or code == EXIT_FILE_SIZE:
        return "file_size"
    if code == EXIT_ADDRESS_SPACE:
        return "address_space"
    return None


# --- Liveness ----------------------------------------------------------------

class Liveness:
    """The child's end of the liveness pipe: cheap, throttled, never raises."""

    def __init__(self, fd: int, every_s: float = ALIVE_EVERY_S):
        # Non-blocking: a parent that stopped draining must not freeze the job.
        os.set_blocking(fd, False)
        self.fd = fd
        self.every_s = every_s
        self._last = float("-inf")

    def signal(self) -> None:
        now = time.monotonic()
        # Two threads may both pass this check and write twice: harmless.
        if now - self._last < self.every_s:
            return
        self._last = now
        try:
            os.write(self.fd, b".")
        except OSError:
            # Full pipe or a parent that is gone: the parent-death watch, not
            # this write, decides what happens next.
            pass


_liveness: Liveness | None = None
_bootstrapped = False
_bootstrap_lock = threading.Lock()


def alive() -> None:
    """Tell the supervisor this child is alive; call it freely, even in hot loops.

    A no-op outside a supervised child, so handlers may call it in any mode.
    """
    if _liveness is not None:
        _liveness.signal()


@contextlib.contextmanager
def keepalive(every_s: float = 1.0, *, until: threading.Event | None = None) -> Iterator[None]:
    """Say "alive" from a thread while a long, quiet step known to be healthy runs.

    For waiting on something that proves its own progress (an ffmpeg pass
    reporting frames). Never wrap code where a deadlock must count as a stall:
    the thread keeps saying so while the step is stuck. A child frozen by
    SIGSTOP still stalls, since the thread is frozen too. With `until`, it
    falls silent once that event is set: from then on the step's own signs
    of life must come (a transfer's first bytes, say).
    """
    done = threading.Event()

    def alive_until_done():
        while not done.wait(every_s) and not (until is not None and until.is_set()):
            alive()

    thread = threading.Thread(target=alive_until_done, name="haulage-keepalive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


# --- Finding the job's processes ----------------------------------------------

def _read_proc(pid: int, name: str) -> bytes | None:
    # os.open/os.read: half the cost of open(), and a stop scans every process.
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_fields(pid: int) -> list[bytes] | None:
    data = _read_proc(pid, "stat")
    if not data:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return data[data.rindex(b")") + 2:].split()


def _running(fields: list[bytes]) -> bool:
    # A zombie runs nothing and holds nothing but its pid; but a main thread
    # that exited shows "Z" while the process's other threads still run.
    return fields[0] not in (b"Z", b"X") or int(fields[17]) > 1


def is_running(pid: int) -> bool:
    """Whether `pid` is a process that still runs (not gone, not a zombie)."""
    fields = _stat_fields(pid)
    return bool(fields) and _running(fields)


def has_marker(pid: int, marker: str) -> bool:
    """Whether the process started with HAULAGE_JOB_MARKER=<marker> in its environment."""
    # None: gone, or another user's process; not ours either way.
    environ = _read_proc(pid, "environ")
    return bool(environ) and f"\0{MARKER_ENV}={marker}\0".encode() in b"\0" + environ + b"\0"


def job_processes(*, root_pid: int, pgid: int, marker: str | None,
                  strangers: set[tuple[int, bytes]] | None = None) -> dict[int, str]:
    """Every running process of a job, each with how it was found.

    "group": in the child's process group; "tree": a descendant of the child
    outside the group; "marker": its environment carries the job's marker.
    The caller's own process is never included. `strangers`, kept by a
    caller that scans repeatedly, remembers (pid, start time) of processes
    already found without the marker, so their environments are read once.
    """
    running: dict[int, tuple[int, int, bytes]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat_fields(int(name))) and _running(fields):
            running[int(name)] = (int(fields[1]), int(fields[2]), fields[19])
    running.pop(os.getpid(), None)
    found = {pid: "group" for pid, (_, pg, _) in running.items() if pg == pgid}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in running.items():
        children.setdefault(ppid, []).append(pid)
    # The child is a subreaper (bootstrap), so while it lives even a
    # double-forked daemon that scrubbed its environment stays in its tree.
    queue = [root_pid]
    while queue:
        for pid in children.get(queue.pop(), ()):
            found.setdefault(pid, "tree")
            queue.append(pid)
    if marker:
        strangers = set() if strangers is None else strangers
        for pid in running.keys() - found.keys():
            # The start time tells a recycled pid from the process we read.
            identity = (pid, running[pid][2])
            if identity in strangers:
                continue
            if has_marker(pid, marker):
                found[pid] = "marker"
            else:
                strangers.add(identity)
    return found


def still_in_job(pid: int, *, pgid: int, known: set[int], marker: str | None) -> bool:
    """Re-check, just before a signal, that `pid` is running and belongs to the job.

    `known` is the job's pids from the last scan: a process whose parent is
    one of them is the job's too.
    """
    fields = _stat_fields(pid)
    if not fields or not _running(fields):
        return False
    ppid, pg = int(fields[1]), int(fields[2])
    return pg == pgid or ppid in known or (marker is not None and has_marker(pid, marker))


def pin_if_ours(pid: int, is_ours: Callable[[int], bool]) -> int | None:
    """A pidfd for `pid` if it is still the process `is_ours` recognises, else None.

    The pidfd pins the process: if `pid` was recycled before the pidfd was
    opened, `is_ours` (read after) rejects the stranger; if our process dies
    later, a signal through the pidfd fails instead of reaching whoever took
    the number. The caller closes the fd.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    if is_ours(pid):
        return pidfd
    os.close(pidfd)
    return None


def signal_if_ours(pid: int, signum: int, is_ours: Callable[[int], bool]) -> bool:
    """Send a signal to `pid` only if it is still the process `is_ours` recognises."""
    pidfd = pin_if_ours(pid, is_ours)
    if pidfd is None:
        return False
    try:
        signal.pidfd_send_signal(pidfd, signum)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)


# --- Bootstrap ----------------------------------------------------------------

def bootstrap() -> None:
    """Make this process a well-behaved supervised child; call it first.

    Applies the limits, becomes a subreaper (orphans of its descendants are
    adopted by this process, and stay zombies until it exits unless it reaps
    them), starts the parent-death watch and says "alive" once. Safe to call twice;
    does nothing outside supervision beyond applying limits found in the
    environment.
    """
    global _liveness, _bootstrapped
    with _bootstrap_lock:
        if _bootstrapped:
            return
        _bootstrapped = True
        Limits.from_env(os.environ.get(LIMITS_ENV, "")).apply()
        _become_subreaper()
        liveness_fd = _inherited_pipe(LIVENESS_FD_ENV)
        parent_fd = _inherited_pipe(PARENT_FD_ENV)
        if parent_fd is not None:
            threading.Thread(
                target=_watch_parent, args=(parent_fd,), name="haulage-parent-watch", daemon=True,
            ).start()
        if liveness_fd is not None:
            _liveness = Liveness(liveness_fd)
            _liveness.signal()


def _inherited_pipe(variable: str) -> int | None:
    """The pipe fd named by `variable`, removed from the environment; None if absent."""
    # Removed so a grandchild that bootstraps too does not use whatever file
    # holds that number in it.
    value = os.environ.pop(variable, None)
    if value is None:
        return None
    try:
        if stat.S_ISFIFO(os.fstat(int(value)).st_mode):
            return int(value)
    except (OSError, ValueError):
        pass
    # A stale variable, not our pipe: an EOF on it must not kill the job.
    sys.stderr.write(f"haulage child: ignoring {variable}={value!r}, not an inherited pipe\n")
    return None


def run(main: Callable[[], object]) -> NoReturn:
    """Bootstrap, run `main`, and exit with the documented code if a limit stopped it."""
    bootstrap()
    try:
        main()
    except BaseException as exc:
        code = _exit_code_for(exc)
        if code is None:
            raise
        # Under memory pressure a traceback may fail again: say one line and leave.
        with contextlib.suppress(Exception):
            sys.stderr.write(f"haulage child: resource limit reached ({exc!r})\n")
            sys.stderr.flush()
            sys.stdout.flush()
        os._exit(code)
    sys.exit(0)


def _exit_code_for(exc: BaseException) -> int | None:
    seen = set()
    # yt-dlp and friends wrap OS errors: follow the chain of causes.
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError):
            return EXIT_ADDRESS_SPACE
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            return EXIT_FILE_SIZE
        exc = exc.__cause__ or exc.__context__
    return None


def _become_subreaper() -> None:
    # Orphans of our descendants reparent to us instead of init, so
    # job_processes() finds them through the tree. Best effort: the marker
    # sweep still covers them where prctl is unavailable.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _watch_parent(fd: int) -> None:
    # A pipe rather than PR_SET_PDEATHSIG: that fires when the *thread* that
    # forked us exits, and the worker's executor threads come and go.
    while True:
        try:
            if not os.read(fd, 1):
                break
        except OSError:
            break
    die_with_job()


def die_with_job() -> NoReturn:
    """Kill every process of this job, this one last, at once: the parent is gone.

    SIGKILL, not TERM: the job's lease will expire and another worker may run
    it again, so nothing here may write anything more.
    """
    me = os.getpid()
    # Not a group leader (started without a session of its own): the group is
    # someone else's, so it is neither scanned nor killed.
    pgid = os.getpgrp() if os.getpgrp() == me else -1
    marker = os.environ.get(MARKER_ENV)
    # A few rounds: an escapee may fork between our scan and its kill.
    for _ in range(3):
        found = job_processes(root_pid=me, pgid=pgid, marker=marker)
        outside = [pid for pid, how in found.items() if how != "group"]
        if not outside:
            break
        known = set(found) | {me}
        for pid in outside:
            signal_if_ours(pid, signal.SIGKILL, lambda p, known=known: still_in_job(
                p, pgid=pgid, known=known, marker=marker))
    if pgid == me:
        os.killpg(pgid, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)
    raise AssertionError("unreachable")  # pragma: no cover
