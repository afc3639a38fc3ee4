"""Tiny CV handlers named for their behaviour, for the transport tests.

Imported by the worker through JOBS_HANDLER_MODULES=tests.cv_handlers,
so no setting names them. Handlers that take a `ledger` path append one line
per event ("start", "finish") with the job, attempt and pid: a file every
process can append to, so a test can count how often a job really ran.
"""

import os
import sys
import time
import uuid

from jobs.cv.worker import cv_handler

# Env knobs for the start-up test: how long the warm-up takes, and a file it
# marks when it starts and ends.
WARMUP_S_ENV = "HAULAGE_TEST_CV_WARMUP_S"
WARMUP_MARKER_ENV = "HAULAGE_TEST_CV_WARMUP_MARKER"


class BrokenClip(Exception):
    code = "broken_clip"


def note(path, *words):
    if path:
        # One write() of a short line with O_APPEND: lines never interleave.
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(" ".join(str(w) for w in words) + "\n")


def warm_up():
    marker = os.environ.get(WARMUP_MARKER_ENV)
    note(marker, "warmup-start", os.getpid())
    time.sleep(float(os.environ.get(WARMUP_S_ENV, "0")))
    note(marker, "warmup-done", os.getpid())


@cv_handler("noop")
def noop(ctx, payload):
    return {"echo": payload.get("echo")}


@cv_handler("sleep_for", warmup=warm_up)
def sleep_for(ctx, payload):
    """Waits `seconds` (or keeps the CPU busy, with `busy`); stops early when
    told to unless `cooperative` is false."""
    run = uuid.uuid4().hex
    note(payload.get("ledger"), "start", ctx.job_id, ctx.attempt, os.getpid(), run)
    deadline = time.monotonic() + payload.get("seconds", 0)
    while time.monotonic() < deadline:
        if payload.get("cooperative", True) and ctx.should_stop():
            note(payload.get("ledger"), "stopped", ctx.job_id, ctx.attempt, os.getpid(), run)
            raise InterruptedError("stopped")
        if payload.get("busy"):
            sum(i * i for i in range(20000))  # pure Python: holds the GIL like heavy work
        else:
            time.sleep(0.02)
    note(payload.get("ledger"), "finish", ctx.job_id, ctx.attempt, os.getpid(), run)
    return {"pid": os.getpid(), "run": run}


def clock():
    """CLOCK_MONOTONIC: one clock for every process on the machine, and never stepped."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def begun(ledger, ctx):
    """Whether `ledger` already holds a run of this attempt."""
    try:
        with open(ledger, encoding="utf-8") as lines:
            return any(line.startswith(f"begin {ctx.job_id} {ctx.attempt} ") for line in lines)
    except FileNotFoundError:
        return False


@cv_handler("stint")
def stint(ctx, payload):
    """Works `seconds` in 50 ms steps, appending to `ledger` a "begin" line, a
    "tick" per step and an "end" saying how it ended (finished or stopped),
    each with job, attempt, pid and `clock()`: a run whose process died on
    the way leaves its last tick as the latest moment it still ran. A run that
    finds an earlier one of the same attempt in the ledger (it took the job
    over) works `again_s` instead, when given. Stops when told to unless
    `cooperative` is false."""
    ledger, fields = payload["ledger"], (ctx.job_id, ctx.attempt, os.getpid())
    seconds = payload.get("again_s", payload["seconds"]) if begun(ledger, ctx) else payload["seconds"]
    note(ledger, "begin", *fields, clock())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if payload.get("cooperative", True) and ctx.should_stop():
            note(ledger, "end", *fields, clock(), "stopped")
            raise InterruptedError("stopped")
        note(ledger, "tick", *fields, clock())
        time.sleep(0.05)
    note(ledger, "end", *fields, clock(), "finished")
    return {"pid": os.getpid()}


@cv_handler("fail")
def fail(ctx, payload):
    if payload.get("exit"):
        sys.exit(payload["exit"])
    if payload.get("coded"):
        raise BrokenClip("the clip is broken")
    raise ValueError(payload.get("message", "no good"))


@cv_handler("write_progress")
def write_progress(ctx, payload):
    steps = payload.get("steps", 4)
    for step in range(1, steps + 1):
        time.sleep(payload.get("step_s", 0.0))
        ctx.progress(step / steps, phase="counting", message=f"step {step} of {steps}")
    return {"steps": steps}
