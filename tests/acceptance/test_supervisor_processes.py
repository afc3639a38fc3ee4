"""The process supervisor against real child processes: stalls, stubborn families,
escapees, a killed parent, shutdown, quiet phases and resource limits.

Timings are small and every bound is a correctness bound (the stall timeout
plus one poll, the grace, ...) with SLACK_S for a busy machine.
"""

import os
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobs.runtime.process import child as childside
from jobs.runtime.process.parent import Child, Limits, StopReason, WatchSettings, watch
from tests.proc import read_stat
from tests.supervisor_children import ROOT, argv

# Nothing here depends on the database: the SQLite pass skips it.
# Reaction times of the watchdog, asserted to a fraction of a second.
pytestmark = [pytest.mark.dbless, pytest.mark.serial]

# Scheduling allowance on a loaded two-core machine; never a speed claim.
SLACK_S = 1.0


running = childside.is_running


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def read_pids(path, roles, timeout_s: float = 15.0) -> dict[str, int]:
    """Wait until every role has reported its pid to `path`."""
    pids: dict[str, int] = {}

    def complete():
        if path.exists():
            pids.update((role, int(pid)) for role, pid in
                        (line.split() for line in path.read_text().splitlines()))
        return set(roles) <= pids.keys()

    assert wait_until(complete, timeout_s), f"only {sorted(pids)} of {sorted(roles)} reported"
    return pids


@pytest.fixture
def spawn():
    """Child.spawn with cwd at the repository; every child is stopped after the test."""
    children = []

    def spawn_child(args, **kwargs):
        child = Child.spawn(args, cwd=ROOT, **kwargs)
        children.append(child)
        return child

    yield spawn_child
    stop_together(children, "requeued", grace_s=0)


def stop_together(children, reason, grace_s):
    """Stop children at once, each from a thread of its own, as a worker's job threads do."""
    if not children:
        return []
    with ThreadPoolExecutor(max_workers=len(children)) as pool:
        return list(pool.map(lambda child: child.stop(reason, grace_s), children))


def test_a_frozen_child_is_stalled_within_stall_plus_poll_and_stopped_within_the_grace(
        spawn, tmp_path):
    pids_file = tmp_path / "pids"
    child = spawn(argv("family", "--pids", str(pids_file)))
    pid = read_pids(pids_file, {"child"})["child"]
    settings = WatchSettings(stall_timeout_s=1.5, poll_interval_s=0.1, kill_grace_s=1.0)

    os.killpg(child.pgid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    outcome = watch(child, settings)
    decided_s = time.monotonic() - frozen_at - outcome.elapsed_s

    assert outcome.reason == "stalled"
    # Its last beat came at most a throttle period (plus a loop turn) before the freeze.
    assert 1.5 - childside.ALIVE_EVERY_S - 0.1 <= decided_s <= 1.5 + 0.1 + SLACK_S
    # SIGCONT after SIGTERM lets the frozen child act on TERM: no KILL needed.
    assert outcome.ended_by == "term"
    assert outcome.status.signal == signal.SIGTERM
    assert outcome.describe() == "stalled: signal 15 (SIGTERM)"
    assert not running(pid)


def test_a_child_and_grandchild_that_ignore_term_are_killed_after_the_grace(spawn, tmp_path):
    pids_file = tmp_path / "pids"
    child = spawn(argv("family", "--pids", str(pids_file), "--ignore-term", "--grandchild"))
    pids = read_pids(pids_file, {"child", "grandchild"})
    settings = WatchSettings(poll_interval_s=0.1, kill_grace_s=1.0)
    cancel_at = time.monotonic() + 0.3

    outcome = watch(child, settings,
                    should_stop=lambda: "cancelled" if time.monotonic() >= cancel_at else None)
    gone_s = time.monotonic() - cancel_at

    assert outcome.reason == "cancelled"
    assert outcome.ended_by == "kill"
    assert outcome.elapsed_s >= 1.0  # TERM was ignored for the whole grace
    assert gone_s <= 0.1 + 1.0 + SLACK_S
    assert {pids["child"], pids["grandchild"]} <= set(outcome.killed_pids)
    assert outcome.status.signal == signal.SIGKILL
    assert not running(pids["child"]) and not running(pids["grandchild"])


def test_a_setsid_escapee_is_swept_by_its_marker(spawn, tmp_path):
    pids_file = tmp_path / "pids"
    child = spawn(argv("family", "--pids", str(pids_file), "--escapee"))
    escapee = read_pids(pids_file, {"child", "escapee"})["escapee"]
    assert read_stat(escapee)[2] != child.pgid  # really outside the group
    assert childside.has_marker(escapee, child.marker)

    outcome = child.stop("cancelled", grace_s=1.0)

    assert escapee in outcome.swept_pids
    assert outcome.ended_by == "term"
    assert not running(escapee)


def test_a_daemon_without_the_marker_is_still_swept_through_the_subreaper_tree(spawn, tmp_path):
    pids_file = tmp_path / "pids"
    child = spawn(argv("family", "--pids", str(pids_file), "--scrubbed-escapee",
                       "--ignore-term"))
    daemon = read_pids(pids_file, {"child", "scrubbed"})["scrubbed"]
    _, ppid, pgid = read_stat(daemon)
    assert pgid != child.pgid and not childside.has_marker(daemon, child.marker)
    assert ppid == child.pid  # orphaned by its double fork, adopted by the child

    outcome = child.stop("cancelled", grace_s=0.5)

    assert outcome.ended_by == "kill"
    assert daemon in outcome.swept_pids and daemon in outcome.killed_pids
    assert not running(daemon)


def test_a_killed_parent_takes_its_childs_whole_job_down_within_two_seconds(tmp_path):
    pids_file = tmp_path / "pids"
    parent = subprocess.Popen(argv("supervising_parent", str(pids_file)), cwd=ROOT)
    try:
        pids = read_pids(pids_file, {"parent", "child", "grandchild", "escapee"})
        job = [pids["child"], pids["grandchild"], pids["escapee"]]
        assert all(running(pid) for pid in job)

        parent.kill()
        parent.wait()
        killed_at = time.monotonic()

        assert wait_until(lambda: not any(running(pid) for pid in job), 2.0 + SLACK_S), (
            [pid for pid in job if running(pid)])
        assert time.monotonic() - killed_at <= 2.0 + SLACK_S
    finally:
        parent.kill()
        parent.wait()
        for pid in pids.values() if "pids" in locals() else ():
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_shutdown_stops_four_running_children_within_one_grace(spawn, tmp_path):
    families = []
    for n, stubborn in enumerate([False, True, False, True]):
        pids_file = tmp_path / f"pids{n}"
        flags = ["--ignore-term", "--grandchild"] if stubborn else ["--grandchild"]
        families.append((spawn(argv("family", "--pids", str(pids_file), *flags)), pids_file))
    all_pids = [pid for _, pids_file in families
                for pid in read_pids(pids_file, {"child", "grandchild"}).values()]
    started = time.monotonic()

    outcomes = stop_together([child for child, _ in families], "requeued", grace_s=1.0)

    # One grace for all of them, not one per child.
    assert time.monotonic() - started <= 1.0 + SLACK_S
    assert [o.reason for o in outcomes] == ["requeued"] * 4
    assert [o.ended_by for o in outcomes] == ["term", "kill", "term", "kill"]
    assert not any(running(pid) for pid in all_pids)


@pytest.mark.parametrize("keepalive, reason", [(True, "exited"), (False, "stalled")])
def test_a_quiet_phase_is_a_stall_only_without_keepalive(spawn, keepalive, reason):
    flags = ["--keepalive"] if keepalive else []
    child = spawn(argv("quiet", "--quiet-s", "3", *flags))

    outcome = watch(child, WatchSettings(stall_timeout_s=2.0, poll_interval_s=0.1,
                                         kill_grace_s=1.0))

    assert outcome.reason == reason
    if keepalive:
        assert outcome.status.code == 0 and outcome.ended_by == "exit"


@pytest.mark.parametrize("mode, limits, limit, status", [
    ("file", Limits(file_size_bytes=1 << 20), "file_size",
     {"code": childside.EXIT_FILE_SIZE}),
    ("cpu", Limits(cpu_time_s=1), "cpu_time", {"signal": signal.SIGXCPU}),
    ("memory", Limits(address_space_bytes=512 << 20), "address_space",
     {"code": childside.EXIT_ADDRESS_SPACE}),
])
def test_a_child_past_its_limit_ends_with_the_documented_code(
        spawn, tmp_path, mode, limits, limit, status):
    ours = {r: resource.getrlimit(r) for r in
            (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_CPU, resource.RLIMIT_CORE)}
    out = tmp_path / "big"
    child = spawn(argv("hog", mode, str(out)), limits=limits, stderr=subprocess.DEVNULL)

    outcome = watch(child, WatchSettings(poll_interval_s=0.1, kill_grace_s=1.0))

    assert outcome.reason == "crashed"
    assert outcome.limit == limit
    assert outcome.error_code == "resource_limit"
    assert outcome.status == type(outcome.status)(**status)
    if mode == "file":
        assert out.stat().st_size <= 1 << 20
    # The supervising process keeps its own limits.
    assert {r: resource.getrlimit(r) for r in ours} == ours


def test_limits_reach_a_program_that_never_bootstraps(spawn, tmp_path):
    out = tmp_path / "big"
    # SIGXFSZ back to its default: a native program is killed by it.
    code = ("import signal, time; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); time.sleep(0.5);"
            f"open({str(out)!r}, 'wb').write(b'x' * 2_000_000)")
    child = spawn([sys.executable, "-c", code], limits=Limits(file_size_bytes=1 << 20))
    with open(f"/proc/{child.pid}/limits") as file:
        row = next(line for line in file if line.startswith("Max file size"))
    assert row.split()[3:5] == ["1048576", "1048576"]

    outcome = watch(child, WatchSettings(poll_interval_s=0.1, kill_grace_s=1.0))

    assert outcome.status.signal == signal.SIGXFSZ
    assert outcome.limit == "file_size"


def test_an_ended_child_is_held_unreaped_until_stop_and_never_signalled_after(
        spawn, monkeypatch):
    child = spawn([sys.executable, "-c", "import sys; sys.exit(3)"])
    status = child.wait(10)
    assert status.code == 3 and child.describe_exit() == "exit code 3"
    # Its zombie keeps the pid and group id ours while leftovers could exist.
    assert read_stat(child.pid)[0] == "Z"

    outcome = child.stop(StopReason.CRASHED)
    assert outcome.ended_by == "exit" and outcome.describe() == "crashed: exit code 3"
    assert read_stat(child.pid) is None or read_stat(child.pid)[0] != "Z"

    sent = []
    for module, name in [(os, "kill"), (os, "killpg"), (signal, "pidfd_send_signal")]:
        monkeypatch.setattr(module, name, lambda *args, name=name: sent.append((name, args)))
    assert child.stop("cancelled") is outcome
    assert child.poll() == status
    assert sent == []


def test_a_child_whose_main_thread_ended_is_not_taken_for_gone(spawn):
    # /proc shows such a process as a zombie while its other thread runs on.
    code = ("import ctypes, signal, threading, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "threading.Thread(target=time.sleep, args=(60,)).start();"
            "ctypes.CDLL(None).pthread_exit(None)")
    child = spawn([sys.executable, "-c", code])
    assert wait_until(lambda: read_stat(child.pid)[0] == "Z", 10)
    assert running(child.pid) and child.poll() is None

    outcome = child.stop("cancelled", grace_s=0.5)

    assert outcome.ended_by == "kill" and outcome.status.signal == signal.SIGKILL
    assert not running(child.pid)


def test_a_failing_watch_stops_the_child_before_raising(spawn, tmp_path):
    pids_file = tmp_path / "pids"
    child = spawn(argv("family", "--pids", str(pids_file), "--grandchild"))
    pids = read_pids(pids_file, {"child", "grandchild"})

    def broken():
        raise ConnectionError("database went away")

    with pytest.raises(ConnectionError):
        watch(child, WatchSettings(poll_interval_s=0.1, kill_grace_s=1.0), should_stop=broken)

    assert child.stop("cancelled").reason == StopReason.ABANDONED
    assert not any(running(pid) for pid in pids.values())


def test_a_program_that_cannot_start_raises_and_leaks_no_descriptor():
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        Child.spawn(["/nonexistent/program"])
    assert len(os.listdir("/proc/self/fd")) == before
