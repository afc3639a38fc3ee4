"""Tiny job kinds named for their behaviour, shared by the engine's tests.

Loaded by tests/conftest.py, and by worker subprocesses through
JOBS_HANDLER_MODULES=tests.handlers.
"""

import os
import signal
import time

from jobs.engine.registry import kind
from jobs.exceptions import Fail, Retry
from jobs.signals import job_finished


@kind("tests.noop")
def noop(ctx, payload):
    return None


@kind("tests.echo", max_attempts=1)
def echo(ctx, payload):
    return {"echo": payload, "attempt": ctx.attempt}


@kind("tests.fail_value_error", max_attempts=2, backoff_base_s=0)
def fail_value_error(ctx, payload):
    raise ValueError("bad value")


@kind("tests.fail_permanent", max_attempts=5)
def fail_permanent(ctx, payload):
    raise Fail("the input can never work", code="bad_input")


@kind("tests.retry_later", max_attempts=3)
def retry_later(ctx, payload):
    raise Retry("gateway busy", delay_s=payload.get("delay_s", 0), code="busy")


@kind("tests.snooze", max_attempts=1)
def snooze(ctx, payload):
    """Snoozes `seconds` (a number, or a string turned into a float) until it has snoozed `times`."""
    if ctx.job.snoozes < payload.get("times", 1):
        seconds = payload.get("seconds", 0)
        ctx.snooze(float(seconds) if isinstance(seconds, str) else seconds, "not yet")
    return {"attempt": ctx.attempt, "snoozes": ctx.job.snoozes}


@kind("tests.slow_backoff", max_attempts=3, backoff_base_s=600)
def slow_backoff(ctx, payload):
    ctx.wait(payload.get("seconds", 0))


@kind("tests.sleep_for", max_attempts=3)
def sleep_for(ctx, payload):
    """Sleeps cooperatively: returns early (and the engine records why) when asked to stop."""
    ctx.wait(payload.get("seconds", 1))
    return {"slept": payload.get("seconds", 1)}


@kind("tests.hang", max_attempts=1, timeout_s=1)
def hang(ctx, payload):
    """Ignores should_stop: only the timeout can end it."""
    time.sleep(payload.get("seconds", 3))
    return {"finished": True}


@kind("tests.progress", max_attempts=1)
def progress(ctx, payload):
    for step in range(1, 5):
        ctx.progress(step / 4, phase="step", message=f"step {step}", force=True)
    return {"steps": 4}


@kind(
    "tests.limited",
    max_attempts=1,
    concurrency_keys=lambda payload, owner: payload.get("keys", []),
    default_limits={"user": 1, "asset": 1, "*": 1},
)
def limited(ctx, payload):
    ctx.wait(payload.get("seconds", 0))
    return None


@kind("tests.unique", unique_key=lambda payload, owner: payload.get("key"),
      fingerprint=lambda payload, owner: payload.get("data", ""))
def unique(ctx, payload):
    return payload


# No backoff: the recovery tests time how soon a rescued attempt runs again.
@kind("tests.ledger", max_attempts=5, backoff_base_s=0)
def ledger(ctx, payload):
    """Append start and commit lines to a ledger file, for recovery tests across processes.

    `seconds` is how long the attempt works; a list gives one per attempt (the
    last repeats), so a test can keep a first attempt alive until it kills it."""
    path = payload["ledger"]
    line = f"{ctx.job.pk} {ctx.attempt} {ctx.job.lease_token} {os.getpid()}"
    with open(path, "a") as f:
        f.write(f"start {line}\n")
    seconds = payload.get("seconds", 0)
    if isinstance(seconds, list):
        seconds = seconds[min(ctx.attempt, len(seconds)) - 1]
    if ctx.wait(seconds):
        with open(path, "a") as f:
            f.write(f"stopped {line} {ctx.stop_reason}\n")
        return None
    ctx.progress(1.0, phase="done", force=True)
    with open(path, "a") as f:
        f.write(f"commit {line}\n")
    return {"pid": os.getpid()}


def _ticks(ctx, payload, *, stop):
    """Note `start`, then a `tick` every 50 ms with the wall-clock time until `seconds` pass or
    `stop()` says so, then `end`: the fence tests read when each execution really ran."""
    seconds = payload.get("seconds", [1])
    seconds = seconds[min(ctx.attempt, len(seconds)) - 1]
    token = f"{ctx.job.pk} {ctx.attempt} {os.getpid()}"
    _note(payload, f"start {token} {time.time():.3f}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop():
        _note(payload, f"tick {token} {time.time():.3f}")
        ctx.alive()  # a sign of life for a child's watchdog (no database: a cut cannot block it)
        time.sleep(0.05)
    _note(payload, f"end {token} {time.time():.3f}")
    return {"pid": os.getpid()}


@kind("tests.fenced", max_attempts=3, backoff_base_s=0)
def fenced(ctx, payload):
    """Works `seconds` (one per attempt), stopping when asked unless `ignore_stop`."""
    return _ticks(ctx, payload, stop=lambda: not payload.get("ignore_stop") and ctx.should_stop())


@kind("tests.other_queue", queue="other")
def other_queue(ctx, payload):
    return None


# --- Process mode: each runs in a supervised child process ---------------------
PROCESS_OPTIONS = {"stall_timeout_s": 2, "kill_grace_s": 1, "poll_interval_s": 0.1}


def _note(payload, text):
    with open(payload["ledger"], "a") as f:
        f.write(text + "\n")


@kind("tests.proc_sleep", mode="process", max_attempts=1, options=PROCESS_OPTIONS)
def proc_sleep(ctx, payload):
    """Beats while it sleeps; records its pid so tests can check it is gone."""
    _note(payload, f"start {ctx.job.pk} {os.getpid()} {os.getpgid(0)}")
    deadline = time.monotonic() + payload.get("seconds", 1)
    while time.monotonic() < deadline:
        ctx.progress(phase="sleeping")
        time.sleep(0.1)
    _note(payload, f"commit {ctx.job.pk} {os.getpid()}")
    return {"pid": os.getpid()}


@kind("tests.proc_quiet", mode="process", max_attempts=1, options=PROCESS_OPTIONS)
def proc_quiet(ctx, payload):
    """A long quiet step (no progress) that keeps beating: not a stall."""
    _note(payload, f"start {ctx.job.pk} {os.getpid()} {os.getpgid(0)}")
    with ctx.keepalive():
        time.sleep(payload.get("seconds", 4))
    return {"quiet": True}


@kind("tests.proc_fenced", mode="process", max_attempts=3, backoff_base_s=0,
      options=PROCESS_OPTIONS)
def proc_fenced(ctx, payload):
    """`tests.fenced` in a child process, which notes no stop of its own: only its group's
    TERM or KILL ends it early."""
    return _ticks(ctx, payload, stop=lambda: False)


@kind("tests.proc_crash", mode="process", max_attempts=1, options=PROCESS_OPTIONS)
def proc_crash(ctx, payload):
    os._exit(payload.get("code", 3))


@kind("tests.proc_exit", mode="process", max_attempts=1, options=PROCESS_OPTIONS)
def proc_exit(ctx, payload):
    """Calls sys.exit() in the child: a failure of the job, recorded with its traceback."""
    import sys

    sys.exit(payload.get("code", 4))


@kind("tests.proc_exits_on_sigterm", mode="process", max_attempts=1, options=PROCESS_OPTIONS)
def proc_exits_on_sigterm(ctx, payload):
    """Turns SIGTERM into SystemExit, as many scripts do: a stop, not a failure of the job."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    _note(payload, f"start {ctx.job.pk} {os.getpid()} {os.getpgid(0)}")
    while True:
        ctx.progress(phase="waiting")
        time.sleep(0.1)


@kind("tests.proc_stubborn", mode="process", max_attempts=1, options=PROCESS_OPTIONS)
def proc_stubborn(ctx, payload):
    """Ignores SIGTERM, and so does its grandchild: only KILL ends them."""
    import signal
    import subprocess
    import sys

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c",
                                   "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    _note(payload, f"start {ctx.job.pk} {os.getpid()} {os.getpgid(0)} {grandchild.pid}")
    while True:
        ctx.progress(phase="ignoring")
        time.sleep(0.1)


# --- Redis mode: forwarded to a CV worker (tests/cv_handlers.py serves the types) ---
@kind("tests.cv_noop", mode="redis", queue="cv", max_attempts=2, options={"cv_type": "noop"})
def cv_noop(ctx, payload):
    raise AssertionError("redis-mode jobs run on CV workers, not here")


@kind("tests.cv_progress", mode="redis", queue="cv", max_attempts=1,
      options={"cv_type": "write_progress"},
      ingest=lambda job, data: {"ingested_steps": data["steps"]})
def cv_progress(ctx, payload):
    raise AssertionError("redis-mode jobs run on CV workers, not here")


@kind("tests.cv_fail", mode="redis", queue="cv", max_attempts=1, options={"cv_type": "fail"})
def cv_fail(ctx, payload):
    raise AssertionError("redis-mode jobs run on CV workers, not here")


def _refuse(job, data):
    raise Fail("the result document is not usable", code="bad_result")


@kind("tests.cv_bad_result", mode="redis", queue="cv", max_attempts=2,
      options={"cv_type": "noop"}, ingest=_refuse)
def cv_bad_result(ctx, payload):
    raise AssertionError("redis-mode jobs run on CV workers, not here")


@kind("tests.gapped", queue="gapped", max_attempts=1)
def gapped(ctx, payload):
    """A job of the `gapped` queue that works `seconds` (tests of a queue's gap set it up)."""
    ctx.wait(payload.get("seconds", 0))
    return None


# --- Rate limits and workflows ------------------------------------------------------
@kind("tests.rated", max_attempts=1, rate_limit="3/s",
      rate_key=lambda payload, owner: payload.get("rate_key", "tests.rated"))
def rated(ctx, payload):
    """At most three starts a second per rate key (`rate_key` in the payload; the kind's name)."""
    return {"key": ctx.job.rate_key}


@kind("tests.chain", max_attempts=3, backoff_base_s=0)
def chain(ctx, payload):
    """A step of a workflow: appends "step <name> <job id> <parents' states>" to the ledger."""
    from jobs.engine.dependencies import parents_of

    states = ",".join(parents_of(ctx.job).values_list("status", flat=True)) or "-"
    with open(payload["ledger"], "a") as f:
        f.write(f"step {payload['name']} {ctx.job.pk} {states}\n")
    if payload.get("fail"):
        raise Fail("this step fails on purpose", code="bad_input")
    return {"name": payload["name"]}


def _kill_after_commit(sender, job, **kwargs):
    """With TESTS_KILL_AFTER_COMMIT set, a worker SIGKILLs itself right after a tests.chain
    job's success has committed, once per job (a file per job id says it did)."""
    folder = os.environ.get("TESTS_KILL_AFTER_COMMIT")
    if not folder or job.kind != "tests.chain" or job.status != "SUCCESSFUL":
        return
    marker = os.path.join(folder, f"killed-after-{job.pk}")
    if os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


job_finished.connect(_kill_after_commit, dispatch_uid="tests.kill_after_commit")
