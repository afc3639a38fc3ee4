"""Haulage's engine figures that no peer has: claim cost against queue depth, and
head-of-line blocking behind one user's backlog. Part of `make bench`.

    .venv/bin/python bench/engine.py [--quick]

Starts its own PostgreSQL; each figure is the median of three runs on a fresh
database copied from a migrated template, and the two figures of each pair
take turns run by run (a machine whose speed drifts slows both alike).
Throughput is measured from the first start to the last finish of the
measured jobs (their own timestamps), with one `manage.py runworker` at its
default settings.
"""

import argparse
import json
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

from tests.services import start_postgres  # noqa: E402

MEASURED = 5000

FILL_SQL = """
INSERT INTO jobs_job (public_id, kind, queue, payload, status, priority, position,
    concurrency_keys, attempts, max_attempts, run_after, worker_ids, fingerprint, phase,
    progress_message, error, error_code, errors, enqueued_at, updated_at, stop_requested, snoozes)
SELECT gen_random_uuid(), 'bench.noop', 'default', %s::jsonb, 'READY', %s, 0, %s::jsonb, 0, 1,
       now(), '[]', '', '', '', '', '', '[]', now() - interval '1 hour', now(), '', 0
FROM generate_series(1, %s)
"""


def env_for(url, scratch):
    return {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "bench-only", "DEBUG": "0",
            "SECURE_SSL_REDIRECT": "0", "HAULAGE_VAR_DIR": str(scratch),
            "JOBS_HANDLER_MODULES": "bench.handlers", "LOG_LEVEL": "WARNING"}


class Server:
    def __init__(self, root):
        self.stop, env = start_postgres(root)
        self.base = env["TEST_POSTGRES_URL"].rsplit("/", 1)[0]
        self.scratch = root
        self.count = 0
        self.admin("CREATE DATABASE template_bench")
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True,
                       env=env_for(f"{self.base}/template_bench", root))

    def admin(self, sql):
        with psycopg.connect(f"{self.base}/postgres", autocommit=True) as conn:
            conn.execute(sql)

    def fresh(self):
        self.count += 1
        name = f"bench_{self.count}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE template_bench")
        return f"{self.base}/{name}"


def fill(url, count, *, priority, keys="[]", payload="{}"):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILL_SQL, [payload, priority, keys, count])


def enqueue_measured(url, *, users=None):
    """MEASURED no-op jobs at priority 0 (ahead of the filler), spread over `users` keys;
    returns the id they all come after."""
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute("SELECT coalesce(max(id), 0) FROM jobs_job").fetchone()[0]
        if users:
            for user in range(users):
                keys = json.dumps([f"user:{user + 2}"])
                conn.execute(FILL_SQL.replace("now() - interval '1 hour'", "now()"),
                             [json.dumps({"measured": 1, "keys": json.loads(keys)}), 0, keys,
                              MEASURED // users])
                conn.execute("INSERT INTO jobs_concurrencylimit (key, \"limit\") VALUES (%s, 1000) "
                             "ON CONFLICT DO NOTHING", [f"user:{user + 2}"])
        else:
            conn.execute(FILL_SQL.replace("now() - interval '1 hour'", "now()"),
                         ['{"measured": 1}', 0, "[]", MEASURED])
        # VACUUM too: otherwise autovacuum starts on the freshly filled table in the middle
        # of the measurement, and the figure is its cost on two cores, not the claim's.
        conn.execute("VACUUM ANALYZE jobs_job")
    return after


def run_worker_until_measured_done(url, scratch, after):
    """Jobs/s of one runworker over the measured jobs (ids above `after`). They are read
    by their id range: a filter on the payload scanned every row behind them five times
    a second, and at a million rows that cost the server more than the worker's claims."""
    worker = subprocess.Popen([sys.executable, "manage.py", "runworker", "--no-scheduler"], cwd=ROOT,
                              env=env_for(url, scratch), stdout=subprocess.DEVNULL)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            while True:
                left = conn.execute("SELECT count(*) FROM jobs_job WHERE id > %s "
                                    "AND status <> 'SUCCESSFUL'", [after]).fetchone()[0]
                if left == 0:
                    break
                if worker.poll() is not None:
                    raise RuntimeError("the worker exited early")
                time.sleep(0.2)
            first, last = conn.execute(
                "SELECT min(started_at), max(finished_at) FROM jobs_job WHERE id > %s", [after]
            ).fetchone()
    finally:
        worker.terminate()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()  # not left serving a database about to be dropped
            raise RuntimeError("runworker did not stop within 60 s of SIGTERM") from None
    return MEASURED / (last - first).total_seconds()


# What `/metrics`, the dashboard and the workers' queue sample read: each queue's
# longest wait. The median of five reads, in milliseconds.
LATENCY_READ = """
import statistics, time
from jobs.selectors import counts
runs = []
for _ in range(5):
    started = time.perf_counter()
    counts.queue_latencies()
    runs.append(time.perf_counter() - started)
print(statistics.median(runs) * 1000)
"""


def latency_read_ms(url, scratch):
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", LATENCY_READ], cwd=ROOT,
                          env=env_for(url, scratch), check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def depth(server, ready_rows, reads=None):
    """Jobs/s with `ready_rows` READY rows in all; `reads` collects the latency read's ms."""
    url = server.fresh()
    fill(url, ready_rows - MEASURED, priority=-1)
    after = enqueue_measured(url)
    if reads is not None:
        reads.append(latency_read_ms(url, server.scratch))
    return run_worker_until_measured_done(url, server.scratch, after)


def head_of_line(server, backlog):
    url = server.fresh()
    if backlog:
        # Through the engine's own bulk enqueue, as an app would queue them.
        code = ("from jobs import services; "
                f"services.enqueue_many([('bench.noop', {{'keys': ['hol:1']}}, {{}})] * {backlog})")
        subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, check=True,
                       env=env_for(url, server.scratch))
    after = enqueue_measured(url, users=50)
    return run_worker_until_measured_done(url, server.scratch, after)


def in_turns(runs, *trials):
    """Each trial (fn, *args) `runs` times, the trials taking turns run by run, so a machine
    whose speed drifts slows each alike; every run's figure, per trial."""
    figures = [[] for _ in trials]
    for _ in range(runs):
        for runs_of, (fn, *args) in zip(figures, trials, strict=True):
            runs_of.append(fn(*args))
    return figures


def compared(base_runs, other_runs):
    """'median (change of medians; runs: ...)' for a figure measured in turns with `base_runs`."""
    base, other = statistics.median(base_runs), statistics.median(other_runs)
    pairs = zip(other_runs, base_runs, strict=True)
    return (f"{other:,.0f} ({other / base - 1:+.0%}; runs: "
            f"{', '.join(f'{rate:,.0f} vs {ref:,.0f}' for rate, ref in pairs)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run each, 100k instead of 1M rows")
    parser.add_argument("--runs", type=int, help="runs per figure (default 3, quick 1)")
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    deep = 100_000 if args.quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="haulage-bench-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        server = Server(root)
        try:
            shallow_reads, deep_reads = [], []
            shallow, deep_runs = in_turns(runs, (depth, server, 1_000 + MEASURED, shallow_reads),
                                          (depth, server, deep + MEASURED, deep_reads))
            free, blocked = in_turns(runs, (head_of_line, server, 0),
                                     (head_of_line, server, 100_000))
        finally:
            server.stop()
    print(f"Each pair of figures measured in turns, medians of {runs} run(s).\n")
    print("| engine figure (PostgreSQL, one runworker, defaults) | jobs/s |")
    print("| --- | ---: |")
    print(f"| {MEASURED:,} no-op jobs with 1k READY rows behind them | "
          f"{statistics.median(shallow):,.0f} |")
    print(f"| the same with {deep:,} READY rows behind them | {compared(shallow, deep_runs)} |")
    print(f"| 50 users' {MEASURED:,} jobs, nobody blocked | {statistics.median(free):,.0f} |")
    print(f"| the same while one user has 100,000 READY jobs at a limit of 1 | "
          f"{compared(free, blocked)} |")
    print()
    print("| each queue's longest wait, as `/metrics` reads it | ms |")
    print("| --- | ---: |")
    print(f"| with 6k READY rows | {statistics.median(shallow_reads):.1f} |")
    print(f"| with {deep + MEASURED:,} READY rows | {statistics.median(deep_reads):.1f} |")


if __name__ == "__main__":
    main()
