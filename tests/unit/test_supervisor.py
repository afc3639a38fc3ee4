"""The supervisor's decisions and the child side's pieces, without child processes."""

import errno
import os
import resource
import signal
import time

import pytest

from jobs.runtime.process import child as childside
from jobs.runtime.process.parent import (
    Child,
    ExitStatus,
    Limits,
    StopOutcome,
    StopReason,
    WatchSettings,
    watch,
    why_stop,
)


class ScriptedChild:
    """Stands in for a Child in the watchdog's decisions: only its answers are scripted."""

    def __init__(self, *, status=None, age_s=0.0, silent_s=0.0):
        self.status = status
        self.started_monotonic = time.monotonic() - age_s
        self.silent_s = silent_s
        self.stopped_for = []

    def poll(self):
        return self.status

    def seconds_since_alive(self):
        return self.silent_s

    def wait(self, timeout_s):
        return self.status

    def stop(self, reason, grace_s):
        self.stopped_for.append(reason)
        return reason


@pytest.mark.parametrize("child, reason", [
    (ScriptedChild(), None),
    (ScriptedChild(status=ExitStatus(code=0)), "exited"),
    (ScriptedChild(status=ExitStatus(code=2)), "crashed"),
    (ScriptedChild(status=ExitStatus(signal=signal.SIGSEGV)), "crashed"),
    (ScriptedChild(silent_s=60.0), "stalled"),
    (ScriptedChild(silent_s=59.0), None),
    (ScriptedChild(age_s=6 * 3600.0), "timeout"),
    # A child past its cap that is also silent: the cap is what it broke first.
    (ScriptedChild(age_s=6 * 3600.0, silent_s=600.0), "timeout"),
    # An ended child is not called stalled, however long it was quiet.
    (ScriptedChild(status=ExitStatus(code=0), silent_s=600.0), "exited"),
])
def test_why_stop(child, reason):
    assert why_stop(child) == reason


def test_why_stop_measures_the_cap_from_the_given_start():
    child = ScriptedChild()
    assert why_stop(child, wall_clock_cap_s=10, started_monotonic=time.monotonic() - 11) == "timeout"


def test_watch_prefers_an_end_to_the_engines_reason_and_that_to_a_stall():
    ended = ScriptedChild(status=ExitStatus(code=0))
    assert watch(ended, should_stop=lambda: "cancelled") == "exited"
    stalled = ScriptedChild(silent_s=120.0)
    assert watch(stalled, should_stop=lambda: "paused") == "paused"
    assert watch(ScriptedChild(silent_s=120.0)) == "stalled"


def test_watch_stops_the_child_when_watching_fails():
    child = ScriptedChild()

    def broken():
        raise RuntimeError("no database")

    with pytest.raises(RuntimeError):
        watch(child, WatchSettings(kill_grace_s=0), should_stop=broken)
    assert child.stopped_for == [StopReason.ABANDONED]


@pytest.mark.parametrize("status, text", [
    (ExitStatus(code=0), "exit code 0"),
    (ExitStatus(code=3), "exit code 3"),
    (ExitStatus(signal=9), "signal 9 (SIGKILL)"),
    (ExitStatus(signal=200), "signal 200"),
    (ExitStatus(), "unknown exit status (reaped elsewhere)"),
])
def test_exit_status_describes_itself(status, text):
    assert status.describe() == text


def outcome(**changes):
    fields = dict(reason="crashed", ended_by="exit", status=ExitStatus(code=122), limit=None,
                  killed_pids=(), swept_pids=(), survivors=(), elapsed_s=0.0)
    return StopOutcome(**{**fields, **changes})


def test_a_hit_limit_is_the_error_code_and_the_reason_otherwise():
    assert outcome(limit="file_size").error_code == "resource_limit"
    assert outcome(limit="file_size").describe() == "resource_limit: file_size (exit code 122)"
    assert outcome(reason="cancelled", status=ExitStatus(signal=15)).error_code == (
        "cancelled")
    assert outcome(reason="stalled", status=None).describe() == "stalled: still running"


@pytest.mark.parametrize("code, signal_number, limit", [
    (None, signal.SIGXCPU, "cpu_time"),
    (None, signal.SIGXFSZ, "file_size"),
    (childside.EXIT_FILE_SIZE, None, "file_size"),
    (childside.EXIT_ADDRESS_SPACE, None, "address_space"),
    (1, None, None),
    (None, signal.SIGKILL, None),
])
def test_limit_hit_reads_the_documented_exit_statuses(code, signal_number, limit):
    assert childside.limit_hit(code=code, signal_number=signal_number) == limit


def test_limits_round_trip_through_the_environment():
    limits = Limits(address_space_bytes=1 << 30, file_size_bytes=1 << 20, cpu_time_s=30)
    assert limits.to_env() == "as=1073741824,fsize=1048576,cpu=30"
    assert Limits.from_env(limits.to_env()) == limits
    assert Limits.from_env("") == Limits() and not Limits()
    assert Limits().rlimits() == []


@pytest.mark.parametrize("text", ["as=1k", "rss=5", "cpu", "cpu=-1"])
def test_malformed_limits_are_refused(text):
    with pytest.raises(ValueError, match=childside.LIMITS_ENV):
        Limits.from_env(text)


def test_limits_give_the_cpu_hard_limit_room_and_forbid_core_files():
    pairs = dict(Limits(cpu_time_s=30).rlimits())
    assert pairs[resource.RLIMIT_CPU] == (30, 30 + childside.CPU_HARD_EXTRA_S)
    assert pairs[resource.RLIMIT_CORE] == (0, 0)


@pytest.mark.parametrize("exc, code", [
    (MemoryError(), childside.EXIT_ADDRESS_SPACE),
    (OSError(errno.EFBIG, "File too large"), childside.EXIT_FILE_SIZE),
    (OSError(errno.ENOSPC, "No space left"), None),
    (ValueError("x"), None),
])
def test_run_maps_a_hit_limit_to_its_exit_code(exc, code):
    assert childside._exit_code_for(exc) == code


def test_run_finds_a_hit_limit_behind_a_wrapping_error():
    try:
        try:
            raise OSError(errno.EFBIG, "File too large")
        except OSError as cause:
            raise RuntimeError("download failed") from cause
    except RuntimeError as wrapped:
        assert childside._exit_code_for(wrapped) == childside.EXIT_FILE_SIZE


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def drain(fd) -> int:
    total = 0
    while True:
        try:
            total += len(os.read(fd, 65536))
        except BlockingIOError:
            return total


def test_beats_are_throttled_so_a_hot_loop_writes_a_few_bytes(pipe):
    read_fd, write_fd = pipe
    liveness = childside.Liveness(write_fd)
    started = time.monotonic()
    for _ in range(200_000):
        liveness.signal()
    elapsed_s = time.monotonic() - started
    assert 1 <= drain(read_fd) <= elapsed_s / childside.ALIVE_EVERY_S + 1


def test_a_beat_never_raises_or_blocks(pipe):
    read_fd, write_fd = pipe
    liveness = childside.Liveness(write_fd, every_s=0)
    os.set_blocking(write_fd, False)
    with pytest.raises(BlockingIOError):
        while True:
            os.write(write_fd, b"x" * 4096)
    liveness.signal()  # a full pipe: the parent stopped reading
    os.close(read_fd)
    liveness.signal()  # no reader at all: the parent is gone


def test_keepalive_beats_from_a_thread_until_the_block_ends(pipe, monkeypatch):
    read_fd, write_fd = pipe
    monkeypatch.setattr(childside, "_liveness", childside.Liveness(write_fd, every_s=0))
    with childside.keepalive(every_s=0.02):
        time.sleep(0.3)
    assert drain(read_fd) >= 2
    time.sleep(0.1)
    assert drain(read_fd) == 0


def test_beat_outside_a_supervised_child_does_nothing(monkeypatch):
    monkeypatch.setattr(childside, "_liveness", None)
    childside.alive()


@pytest.mark.parametrize("marker", ["short", "has space in it", "x" * 200, "a=b;rm -rf /"])
def test_a_malformed_marker_is_refused_before_anything_starts(marker):
    with pytest.raises(ValueError, match="marker"):
        Child.spawn(["/bin/true"], marker=marker)


def test_the_default_settings_are_the_documented_ones():
    assert WatchSettings() == WatchSettings(
        stall_timeout_s=60.0, wall_clock_cap_s=6 * 3600.0, kill_grace_s=5.0,
        poll_interval_s=0.25)
