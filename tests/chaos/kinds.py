"""The chaos suite's job kinds: handlers that write an execution ledger.

Workers load this module through JOBS_HANDLER_MODULES=tests.chaos.kinds; the
harness registers the same kinds in its own process to enqueue them. Every
execution appends to a ledger file of its own process (CHAOS_LEDGER_DIR):

    start  <job> <attempt> <token> <pid> <worker pid> <monotonic> <wall> <spawned>
    commit <job> <attempt> <token> <pid> <worker pid> <monotonic> <wall> -
    abort  <job> <attempt> <token> <pid> <worker pid> <monotonic> <wall> <reason>

`spawned` is when the process that runs the handler started (monotonic), for
process-mode jobs whose child needs a moment before it can write; "-" inline.
The handler's result names the execution that committed it, so the checker can
tell which execution the job row took its result from.

`chaos.cv` is a redis-mode kind: the runworker publishes it to Redis and a
`manage.py runcvworker` runs it (tests/chaos/cvkinds.py, the same ledger). A
CV worker knows no lease token, only the attempt, so its executions are named
`cv<attempt>` (`claim_name`): the sampler and the faults name its claims the
same way. Downloads run the real `downloads.fetch` and write no ledger.
"""

import os
import time

from jobs.engine import registry
from jobs.exceptions import Fail

LEDGER_DIR_ENV = "CHAOS_LEDGER_DIR"
QUEUE = "chaos"
INLINE = "chaos.inline"
PROCESS = "chaos.process"
CV = "chaos.cv"
CV_TYPE = "chaos_cv"  # the CV worker's job type for CV

# Many attempts: a job may be caught by several faults in a row, and a job
# that fails for having been unlucky is not what these runs look for.
MAX_ATTEMPTS = 25
# Handlers sleep in steps this long, checking whether to stop in between.
STEP_S = 0.1


def _keys(payload, owner):
    return list(payload.get("keys", []))


def write(event, ctx, extra="-"):
    """Append one ledger line; a single O_APPEND write, so lines never interleave."""
    folder = os.environ.get(LEDGER_DIR_ENV)
    if not folder:
        raise Fail(f"{LEDGER_DIR_ENV} is not set; chaos jobs need a ledger folder.", code="no_ledger")
    # A process-mode handler runs in a child whose parent is the worker.
    worker_pid = os.getppid() if _in_child() else os.getpid()
    line = (f"{event} {ctx.job.pk} {ctx.attempt} {ctx.job.lease_token} {os.getpid()} {worker_pid} "
            f"{time.monotonic():.6f} {time.time():.6f} {extra}\n")
    fd = os.open(os.path.join(folder, f"{os.getpid()}.ledger"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _in_child():
    from jobs.runtime.process.child import MARKER_ENV

    return MARKER_ENV in os.environ


def spawned_monotonic():
    """When this process started, on the monotonic clock (from /proc/self/stat)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    started_since_boot_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - started_since_boot_s
    return time.monotonic() - age_s


def run(ctx, payload):
    """Start, work in short steps, confirm the lease, commit: the life of one ledger execution."""
    spawned = f"{spawned_monotonic():.6f}" if _in_child() else "-"
    write("start", ctx, spawned)
    deadline = time.monotonic() + payload.get("seconds", 0)
    while (left_s := deadline - time.monotonic()) > 0:
        if ctx.wait(min(STEP_S, left_s)):
            write("abort", ctx, ctx.stop_reason)
            return None
        ctx.alive()
    # A guarded write just before committing: an execution whose lease was
    # taken over learns it here and aborts instead of committing.
    ctx.progress(1.0, phase="done", force=True)
    if ctx.should_stop():
        write("abort", ctx, ctx.stop_reason)
        return None
    write("commit", ctx)
    return {"token": str(ctx.job.lease_token), "attempt": ctx.attempt, "pid": os.getpid()}


def claim_name(kind, lease_token, attempt):
    """What the ledger calls a claim: its lease token, or `cv<attempt>` for a CV job."""
    return f"cv{attempt}" if kind == CV else str(lease_token)


def ingest(job, data):
    """The CV worker's result document is the job's result (it names its execution)."""
    return data


def run_elsewhere(ctx, payload):
    raise AssertionError("chaos.cv jobs run on CV workers (tests/chaos/cvkinds.py), not here")


# A retry, and a rescue, waits at most this long (the recovery bound adds it).
BACKOFF_MAX_S = 2

PROCESS_OPTIONS = {"stall_timeout_s": 10, "kill_grace_s": 1, "poll_interval_s": 0.1}

KINDS = {
    INLINE: {"queue": QUEUE, "max_attempts": MAX_ATTEMPTS, "backoff_base_s": 0.2,
             "backoff_max_s": BACKOFF_MAX_S, "concurrency_keys": _keys, "default_limits": {"*": 1}},
    PROCESS: {"queue": QUEUE, "max_attempts": MAX_ATTEMPTS, "backoff_base_s": 0.2,
              "backoff_max_s": BACKOFF_MAX_S, "concurrency_keys": _keys, "default_limits": {"*": 1},
              "mode": "process", "options": PROCESS_OPTIONS},
    CV: {"queue": QUEUE, "max_attempts": MAX_ATTEMPTS, "backoff_base_s": 0.2,
         "backoff_max_s": BACKOFF_MAX_S, "concurrency_keys": _keys, "default_limits": {"*": 1},
         "mode": "redis", "options": {"cv_type": CV_TYPE}, "ingest": ingest},
}


def register():
    for name, policy in KINDS.items():
        registry.register(name, run_elsewhere if name == CV else run, **policy)


def unregister():
    for name in KINDS:
        registry.unregister(name)


register()
