"""The faults a scenario injects, one function each; every one records what it did on the run.

A fault that takes a worker out of service (killed, frozen, cut off) records
the jobs that worker held at that moment, so the checker can time how long
they took to run again.
"""

import os
import signal
import subprocess
import sys
import time

from django.db import Error, connection

from tests.chaos import procs
from tests.chaos.harness import APPLICATION_NAME, RUN_ENV, reset_connection


def _now():
    return time.monotonic(), time.time()


# A fault aimed at a worker picks one that has been up this long: a worker
# still importing Django holds nothing, and hitting it tests nothing.
SERVING_FOR_S = 3.0


def kill_worker(run):
    """SIGKILL one running worker, chosen at random: no shutdown, no requeue, nothing written."""
    live = run.fleet.targets(SERVING_FOR_S)
    if not live:
        return None
    worker = run.rng.choice(sorted(live, key=lambda w: w.slot))
    at = _now()
    if not run.fleet.signal(worker, signal.SIGKILL):
        return None
    return run.worker_lost("worker_kill", worker, at, check_survivors=True)


def kill_child(run):
    """SIGKILL one process-mode child of a live worker, chosen at random."""
    kids = procs.children(RUN_ENV, run.id, {w.pid for w in run.fleet.live()})
    if not kids:
        return None
    pid, marker = run.rng.choice(sorted(kids))
    at = _now()
    if not procs.kill_if_of_run(pid, RUN_ENV, run.id):
        return None
    fault = run.record("child_kill", marker, pid=pid, at=at)
    # Timed like a recovery (until the job is claimed again), but not held to
    # the lease bound: the worker lives on and retries the job after a backoff.
    _, job, token = marker.split("-", 2)
    fault.held = [(int(job), token)]
    run.check_survivors_later(fault, [marker])
    return fault


def freeze_worker(run, seconds):
    """SIGSTOP one worker for `seconds` (past its lease), then SIGCONT: it must write nothing stale."""
    live = run.fleet.targets(SERVING_FOR_S)
    if not live:
        return None
    worker = run.rng.choice(sorted(live, key=lambda w: w.slot))
    worker.frozen = True
    at = _now()
    if not run.fleet.freeze(worker):
        worker.frozen = False
        return None
    try:
        fault = run.worker_lost("worker_stop", worker, at, check_survivors=False)
        fault.detail["seconds"] = seconds
        # Not cut short by the end of the window: a frozen worker is always woken.
        time.sleep(seconds)
    finally:
        run.fleet.signal(worker, signal.SIGCONT)
        worker.frozen = False
    return fault


# Statements the engine runs only after it locked concurrency-limit rows in the
# same transaction (claim, completion, rescue and enqueue all lock them first).
AFTER_LIMIT_LOCKS = ("jobs_concurrencylimit", "jsonb_array_elements_text", '"blocked_key" = ',
                     "SET status = 'RUNNING'")


def freeze_worker_in_transaction(run, seconds, *, after=AFTER_LIMIT_LOCKS, search_s=10.0):
    """SIGSTOP a worker caught between two statements of a transaction, for `seconds`.

    The worst moment for a pause (a VM stall, SIGSTOP, a partition): its
    session sits "idle in transaction" holding the rows it locked. The worker
    is stopped the moment PostgreSQL shows such a session whose last statement
    contains one of `after`, and kept stopped only if a moment later that
    session is still there and the worker holds running jobs (whose recovery
    can then be timed); otherwise it is woken at once and another moment sought.
    """
    deadline = time.monotonic() + search_s
    while time.monotonic() < deadline:
        workers = {w.slot: w for w in run.fleet.targets(SERVING_FOR_S)}
        caught = [workers[slot] for slot in _sessions_in_transaction(after) if slot in workers]
        if not caught:
            time.sleep(0.005)
            continue
        worker = caught[0]
        worker.frozen = True
        at = _now()
        run.fleet.signal(worker, signal.SIGSTOP)
        time.sleep(0.2)
        statement = _sessions_in_transaction(after).get(worker.slot)
        if statement is None or not run.held_by(worker.name):
            run.fleet.signal(worker, signal.SIGCONT)
            worker.frozen = False
            continue
        try:
            fault = run.worker_lost("stop_in_transaction", worker, at, check_survivors=False)
            fault.detail.update(seconds=seconds, statement=statement)
            run.notes.append(f"{worker.name} stopped {seconds:.0f} s after: {statement}")
            time.sleep(max(0.0, seconds - 0.2))
        finally:
            run.fleet.signal(worker, signal.SIGCONT)
            worker.frozen = False
        return fault
    return None


def _sessions_in_transaction(after):
    """{worker slot: last statement} of worker sessions idle inside a transaction after one of `after`."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT application_name, left(query, 200) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name LIKE %s "
                "AND state = 'idle in transaction'",
                [f"{APPLICATION_NAME}-%"],
            )
            rows = cursor.fetchall()
    except Error:
        reset_connection()
        return {}
    return {int(name.rsplit("-", 1)[1]): query for name, query in rows
            if any(text in query for text in after)}


def restart_postgres(run, outage_s):
    """Stop PostgreSQL at once (`-m immediate`: no checkpoint, clients cut), start it `outage_s` later."""
    server = run.config.pg_server
    at = _now()
    server.stop("immediate")
    fault = run.record("pg_restart", "postgresql", at=at, detail={"outage_s": outage_s})
    try:
        time.sleep(outage_s)
    finally:
        server.start()
    return fault


def terminate_sessions(run):
    """pg_terminate_backend() every worker session of this database (the workers' only)."""
    at = _now()
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name LIKE %s "
                "AND pid <> pg_backend_pid()",
                [f"{APPLICATION_NAME}-%"],
            )
            [ended] = cursor.fetchone()
    except Error:
        reset_connection()
        return None
    return run.record("terminate_sessions", "workers", at=at, detail={"sessions": ended})


def proxy_fault(run, mode, seconds, *, reset):
    """Cut one worker off through its proxy (`drop_replies` or `partition`) for `seconds`, then heal."""
    live = [w for w in run.fleet.targets(SERVING_FOR_S) if w.slot in run.fleet.proxies]
    if not live:
        return None
    worker = run.rng.choice(sorted(live, key=lambda w: w.slot))
    proxy = run.fleet.proxies[worker.slot]
    at = _now()
    getattr(proxy, mode)()
    try:
        fault = run.worker_lost(mode, worker, at, check_survivors=False)
        fault.detail.update(seconds=seconds, reset=reset)
        time.sleep(seconds)
    finally:
        proxy.heal(reset=reset)
    return fault


BURN = "import time\nwhile True:\n    time.monotonic()\n"


def start_burners(run, count):
    """Start `count` processes that spin on the CPU until `stop_burners`."""
    env = {**os.environ, RUN_ENV: run.id}
    for _ in range(count):
        run.burners.append(subprocess.Popen([sys.executable, "-c", BURN], env=env,
                                            stdin=subprocess.DEVNULL))
    run.record("cpu_contention", f"{count} busy processes", detail={"processes": count})


def stop_burners(run):
    for proc in run.burners:
        proc.kill()
        proc.wait(10)
    run.burners.clear()


# --- Redis ---------------------------------------------------------------------------------


def restart_redis(run, outage_s):
    """SIGKILL the run's Redis (no persistence: every key is gone) and start it empty `outage_s` later."""
    at = _now()
    with run.redis.client() as client:
        keys = client.dbsize()
    run.redis.kill()
    fault = run.record("redis_restart", "redis", at=at,
                       detail={"outage_s": outage_s, "keys_lost": keys})
    try:
        time.sleep(outage_s)
    finally:
        run.redis.start()
    return fault


def stall_redis(run, seconds):
    """CLIENT PAUSE ALL for `seconds`: Redis accepts connections but answers nothing meanwhile."""
    at = _now()
    run.redis.pause(seconds * 1000)
    fault = run.record("redis_stall", "redis", at=at, detail={"seconds": seconds})
    # Not cut short by the end of the window: the server ends the pause on its own.
    time.sleep(seconds)
    return fault


# --- The media disk ------------------------------------------------------------------------


def wait_for_a_transfer(run, timeout_s):
    """Wait until some download is writing a partial file under MEDIA_ROOT/staging (or time
    out, or the run's fault window closes)."""
    staging = run.media_root / "staging"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not run.stop_faults.is_set():
        if any(_has_bytes(f) for f in staging.glob("*/*")):
            return True
        time.sleep(0.05)
    return False


def _has_bytes(path):
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False  # gone meanwhile: that transfer finished


def fill_disk(run, seconds):
    """Fill MEDIA_ROOT's file system (a small tmpfs) for `seconds`, then free it again."""
    from tests.chaos import downloads

    at = _now()
    filler = downloads.fill(run.media_root)
    fault = run.record("disk_full", str(run.media_root), at=at,
                       detail={"seconds": seconds, "filler_bytes": filler.stat().st_size})
    try:
        time.sleep(seconds)
    finally:
        filler.unlink(missing_ok=True)
    return fault
