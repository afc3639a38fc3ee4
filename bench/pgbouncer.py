"""Many workers through PgBouncer: 20 runworker processes (concurrency 2 each) through a
pool of 10 server connections, against the same workers connected directly. Part of
`make bench`.

    .venv/bin/python bench/pgbouncer.py [--quick] [--runs N]

Starts its own PostgreSQL and a PgBouncer in transaction pooling mode in front of it
(tests/services.py). Each figure: the workers start and register, then the
measured no-op jobs arrive in one statement with a NOTIFY; throughput runs from
the first start to the last finish (the jobs' own timestamps). Through the pool
the workers set DATABASE_POOLER=transaction and LISTEN on a direct connection
(JOBS_LISTEN_DATABASE_URL), as docs/operations.md recommends. With several runs the
two take turns run by run (a machine whose speed drifts slows both alike).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine import FILL_SQL, Server, compared, env_for, in_turns  # noqa: E402
from tests.services import start_pgbouncer  # noqa: E402

WORKERS = 20
CONCURRENCY = 2
POOL_SIZE = 10  # server connections PgBouncer keeps to the database, in all
START_TIMEOUT_S = 180


def start_workers(url, scratch, extra_env):
    env = {**env_for(url, scratch), **extra_env}
    return [subprocess.Popen([sys.executable, "manage.py", "runworker", "--no-scheduler",
                              "--concurrency", str(CONCURRENCY), "--worker-id", f"bench-{n}"],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
            for n in range(WORKERS)]


def wait_registered(conn, workers):
    deadline = time.monotonic() + START_TIMEOUT_S
    while conn.execute("SELECT count(*) FROM jobs_worker WHERE stopped_at IS NULL").fetchone()[0] \
            < WORKERS:
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
            raise RuntimeError("the workers did not all start")
        time.sleep(0.2)
    time.sleep(1.0)  # past registering: their listeners and first (empty) claims


def throughput(direct_url, worker_url, scratch, jobs, extra_env=None):
    """Jobs/s of WORKERS runworkers on `worker_url` for `jobs` no-op jobs enqueued at once."""
    workers = start_workers(worker_url, scratch, extra_env or {})
    try:
        with psycopg.connect(direct_url, autocommit=True) as conn:
            wait_registered(conn, workers)
            with conn.transaction():
                conn.execute(FILL_SQL.replace("now() - interval '1 hour'", "now()"),
                             ['{"measured": 1}', 0, "[]", jobs])
                conn.execute("SELECT pg_notify('haulage_jobs', 'default')")
            deadline = time.monotonic() + 600
            while conn.execute("SELECT count(*) FROM jobs_job WHERE status <> 'SUCCESSFUL'"
                               ).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the jobs did not finish within 600 s")
                time.sleep(0.1)
            first, last = conn.execute(
                "SELECT min(started_at), max(finished_at) FROM jobs_job").fetchone()
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(60)
    return jobs / (last - first).total_seconds()


def direct(server, root, jobs):
    url = server.fresh()
    return throughput(url, url, root, jobs)


def pooled(server, pool_base, root, jobs):
    url = server.fresh()
    return throughput(url, f"{pool_base}/{url.rsplit('/', 1)[1]}", root, jobs,
                      {"DATABASE_POOLER": "transaction", "JOBS_LISTEN_DATABASE_URL": server.base})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 jobs instead of 5,000")
    parser.add_argument("--runs", type=int, default=1, help="runs of each, in turns (medians)")
    args = parser.parse_args()
    jobs = 2000 if args.quick else 5000
    with tempfile.TemporaryDirectory(prefix="haulage-bench-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        server = Server(root)
        pg_port = server.base.rsplit(":", 1)[1]
        stop_pool, pool_env = start_pgbouncer(root, pg_port, pool_size=POOL_SIZE,
                                              max_db_connections=POOL_SIZE)
        if stop_pool is None:
            sys.exit("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        pool_base = pool_env["TEST_PGBOUNCER_URL"].rsplit("/", 1)[0]
        try:
            direct_runs, pooled_runs = in_turns(args.runs, (direct, server, root, jobs),
                                                (pooled, server, pool_base, root, jobs))
        finally:
            stop_pool()
            server.stop()
    print(f"| {WORKERS} runworkers x concurrency {CONCURRENCY}, {jobs:,} no-op jobs "
          f"(medians of {args.runs}) | jobs/s |")
    print("| --- | ---: |")
    print(f"| connected directly to PostgreSQL | {statistics.median(direct_runs):,.0f} |")
    print(f"| through PgBouncer (transaction pooling, {POOL_SIZE} server connections) "
          f"| {compared(direct_runs, pooled_runs)} |")


if __name__ == "__main__":
    main()
