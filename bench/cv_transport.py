"""The CV transport's overhead: no-op CV jobs per second through a real Redis, end to end.

    .venv/bin/python bench/cv_transport.py [--jobs 2000] [--concurrency 4]

Starts its own redis-server on a free loopback port and one `manage.py
runcvworker` process (the test handlers' `noop`), publishes the jobs, and
waits until every status says done. The clock runs from the first publish
to the last done, so it covers the publish, the reliable pop, the claim, the
status writes and the durable result file (fsynced) of every job.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    sys.exit(f"bench: {what} within {timeout_s} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="haulage-bench-cv-"))
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-only-secret-key-not-for-production",
        "DEBUG": "0",
        "HAULAGE_VAR_DIR": str(folder / "var"),
        "MEDIA_ROOT": str(folder / "media"),
        "REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "CV_REDIS_PREFIX": "bench",
        "JOBS_HANDLER_MODULES": "tests.cv_handlers",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    import django

    django.setup()
    from jobs.cv import clients
    from jobs.cv.transport import Transport

    redis_server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    worker = None
    client = clients.build_client()
    try:
        wait_until(lambda: _answers(client), 10, "redis-server did not start")
        transport = Transport(client)
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "runcvworker", "--types", "noop",
             "--concurrency", str(args.concurrency)],
            cwd=ROOT, env=env,
        )
        wait_until(lambda: transport.live_workers(), 60, "the CV worker did not start")

        job_ids = [f"b{n}" for n in range(args.jobs)]
        started = time.perf_counter()
        for job_id in job_ids:
            transport.publish("noop", job_id, 1, {"echo": job_id})
        published_s = time.perf_counter() - started
        # Cheap polls (queue and processing lengths) until nothing is left in
        # flight, so the bench does not steal CPU from the worker it measures.
        processing = transport.processing_key(transport.live_workers()[0]["worker_id"])
        wait_until(lambda: client.llen(transport.queue_key("noop")) == 0 and not client.exists(processing),
                   300, "the jobs did not finish")
        elapsed_s = time.perf_counter() - started
        keys = [transport.status_key(job_id) for job_id in job_ids]
        wait_until(lambda: _all_done(client, keys), 10, "some jobs are not done")
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        client.close()
        redis_server.terminate()
        redis_server.wait(10)
        shutil.rmtree(folder, ignore_errors=True)

    print(
        f"| CV transport, no-op jobs end to end (real Redis, 1 worker process x {args.concurrency} "
        f"threads, fsynced result files) | {args.jobs} jobs in {elapsed_s:.2f} s "
        f"| **{args.jobs / elapsed_s:.0f} jobs/s** | publish alone: {args.jobs / published_s:.0f} jobs/s |"
    )


def _answers(client):
    try:
        return client.ping()
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _all_done(client, keys):
    # One MGET of the jobs not yet seen done, not of all of them every time.
    pending = []
    for key, value in zip(keys, client.mget(keys), strict=True):
        state = json.loads(value)["state"] if value else None
        if state == "failed":
            sys.exit(f"bench: {key} failed: {value}")
        if state != "done":
            pending.append(key)
    keys[:] = pending
    return not pending


if __name__ == "__main__":
    main()
