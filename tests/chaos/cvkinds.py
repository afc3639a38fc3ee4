"""The CV side of `chaos.cv`: a CV handler that writes the chaos ledger.

CV workers load it through JOBS_HANDLER_MODULES=tests.chaos.cvkinds.
The lines have the format of tests/chaos/kinds.py; the token is `cv<attempt>`
(a CV worker knows no lease token) and pid and worker pid are both the CV
worker's own, since its handlers run in threads.
"""

import os
import time

from jobs.cv.worker import cv_handler
from tests.chaos.kinds import CV_TYPE, LEDGER_DIR_ENV, STEP_S, claim_name


def write(event, ctx, extra="-"):
    """Append one ledger line with a single O_APPEND write, as the engine-side kinds do."""
    token = claim_name("chaos.cv", None, ctx.attempt)
    pid = os.getpid()
    line = (f"{event} {ctx.job_id} {ctx.attempt} {token} {pid} {pid} "
            f"{time.monotonic():.6f} {time.time():.6f} {extra}\n")
    fd = os.open(os.path.join(os.environ[LEDGER_DIR_ENV], f"{pid}.ledger"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@cv_handler(CV_TYPE)
def run(ctx, payload):
    """Start, work in short steps (stopping when asked), commit: one CV execution."""
    write("start", ctx)
    deadline = time.monotonic() + payload.get("seconds", 0)
    while (left_s := deadline - time.monotonic()) > 0:
        if ctx.should_stop():
            write("abort", ctx, "stopped")
            # The worker hands the job back (shutdown) or reports it cancelled.
            raise InterruptedError("stopped")
        time.sleep(min(STEP_S, left_s))
    write("commit", ctx)
    return {"token": claim_name("chaos.cv", None, ctx.attempt), "attempt": ctx.attempt,
            "pid": os.getpid()}
