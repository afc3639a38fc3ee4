"""How close the observed start rate comes to a configured rate limit. Part of `make bench`.

    .venv/bin/python bench/rates.py [--quick]

Starts its own PostgreSQL, queues more `bench.rated` jobs (20 starts per 10 s,
one rate key) than can start, and runs two `manage.py runworker` processes
for a minute (half with --quick). Each job's start is read from its row (the
database's clock); the table shows the starts in each 10 s window from the
first one, the most in any sliding 10 s window (never above 20 if the limit
holds), and the observed rate over the configured one.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine import Server, env_for  # noqa: E402

LIMIT, PERIOD_S = 20, 10.0
JOBS = 400  # more than a minute can start: the limit, not the queue, must bind

QUEUE_SQL = """
INSERT INTO jobs_job (public_id, kind, queue, payload, status, priority, position, rate_key,
    concurrency_keys, attempts, max_attempts, run_after, worker_ids, fingerprint, phase,
    progress_message, error, error_code, errors, enqueued_at, updated_at, stop_requested, snoozes)
SELECT gen_random_uuid(), 'bench.rated', 'default', '{}', 'READY', 0, 0, 'bench.rated', '[]', 0,
       1, now(), '[]', '', '', '', '', '', '[]', now(), now(), '', 0
FROM generate_series(1, %s)
"""


def run(seconds):
    with tempfile.TemporaryDirectory(prefix="haulage-bench-rates-") as scratch:
        os.chmod(scratch, 0o755)  # the postgres user runs the server in it
        server = Server(Path(scratch))
        try:
            url = server.fresh()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute('INSERT INTO jobs_ratelimit (key, "limit", period_seconds, starts) '
                             "VALUES ('bench.rated', %s, %s, '[]')", [LIMIT, PERIOD_S])
                conn.execute(QUEUE_SQL, [JOBS])
            workers = [subprocess.Popen([sys.executable, "manage.py", "runworker", "--no-scheduler",
                                         "--worker-id", f"bench-{n}"], cwd=ROOT,
                                        env=env_for(url, Path(scratch)), stdout=subprocess.DEVNULL)
                       for n in range(2)]
            time.sleep(seconds)
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(60)
            with psycopg.connect(url, autocommit=True) as conn:
                starts = [row[0] for row in conn.execute(
                    "SELECT EXTRACT(EPOCH FROM first_started_at)::float8 FROM jobs_job "
                    "WHERE first_started_at IS NOT NULL ORDER BY 1")]
                by_worker = dict(conn.execute(
                    "SELECT worker_ids->>0, count(*) FROM jobs_job WHERE first_started_at IS NOT NULL "
                    "GROUP BY 1").fetchall())
        finally:
            server.stop()
    return starts, by_worker


def report(starts, by_worker, seconds):
    first = starts[0]
    windows = int(seconds // PERIOD_S)
    counts = [sum(1 for t in starts if first + i * PERIOD_S <= t < first + (i + 1) * PERIOD_S)
              for i in range(windows)]
    most = max(sum(1 for t in starts[i:] if t < start + PERIOD_S) for i, start in enumerate(starts))
    full = counts[:-1] or counts  # the last window may be cut by the stop
    observed = sum(full) / len(full)
    print(f"| rate limit {LIMIT}/{PERIOD_S:g}s, two runworkers, {seconds:g} s | starts |")
    print("| --- | ---: |")
    for i, count in enumerate(counts):
        print(f"| window {i + 1} ({i * PERIOD_S:g}-{(i + 1) * PERIOD_S:g} s) | {count} |")
    print(f"| most in any sliding {PERIOD_S:g} s window | {most} |")
    print(f"| observed / configured (mean of full windows) | {observed / LIMIT:.2f} |")
    print(f"| starts per worker | {', '.join(str(n) for _w, n in sorted(by_worker.items()))} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="half a minute instead of one")
    args = parser.parse_args()
    seconds = 30.0 if args.quick else 60.0
    starts, by_worker = run(seconds)
    if not starts:
        print("no job started", file=sys.stderr)
        return 1
    report(starts, by_worker, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
