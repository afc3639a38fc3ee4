"""The full chaos run: every scenario against real workers, then a table of figures.

    python -m tests.chaos.run --scenario all --seed 7 --jobs 3000 --workers 4 --duration 60

The database is a fresh one named `haulage_chaos` on the PostgreSQL server of
TEST_POSTGRES_URL (as `python -m tests.services` exports), or an SQLite file
with --sqlite. Exits non-zero when any guarantee was broken.
"""

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

CHAOS_DATABASE = "haulage_chaos"


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="all",
                        help="'all' or comma-separated names (default: all for the database)")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per scenario (default: 3000)")
    parser.add_argument("--workers", type=int, default=4, help="runworker processes (default: 4)")
    parser.add_argument("--concurrency", type=int, default=6, help="per worker (default: 6)")
    parser.add_argument("--duration", type=float, default=60,
                        help="seconds of faults per scenario (default: 60)")
    parser.add_argument("--outage", type=float, default=10,
                        help="seconds PostgreSQL stays down in pg_restart (default: 10)")
    parser.add_argument("--burners", type=int, default=3,
                        help="busy processes in cpu_contention (default: 3)")
    parser.add_argument("--worker-db-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a libpq parameter for the workers' connections, e.g. "
                             "'options=-c idle_in_transaction_session_timeout=3000' (repeatable)")
    parser.add_argument("--sqlite", action="store_true", help="run on an SQLite file instead")
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL server URL (default: TEST_POSTGRES_URL); "
                             f"the run uses a fresh database {CHAOS_DATABASE!r} on it")
    parser.add_argument("--work-dir", default=None, help="ledgers and worker logs (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    return parser.parse_args(argv)


def fresh_postgres_database(server_url):
    """Drop and create CHAOS_DATABASE on the server of `server_url`; return its URL."""
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {CHAOS_DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {CHAOS_DATABASE}")
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{CHAOS_DATABASE}", "", ""))


def setup_django(database_url):
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["JOBS_HANDLER_MODULES"] = "tests.chaos.kinds"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def empty_tables():
    """Each scenario starts from an empty queue (and no downloads)."""
    from downloads.models import Download, MediaAsset
    from jobs.models import ConcurrencyLimit, Job, JobEvent, Queue, Worker

    for model in (Download, MediaAsset, JobEvent, Job, Worker, ConcurrencyLimit, Queue):
        model.objects.all().delete()


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="haulage-chaos-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    if args.sqlite:
        database_url = f"sqlite:///{work_dir / 'chaos.sqlite3'}"
    else:
        server = args.database_url or os.environ.get("TEST_POSTGRES_URL")
        if not server:
            sys.exit("No PostgreSQL: pass --database-url, run under `python -m tests.services --`, "
                     "or use --sqlite.")
        database_url = fresh_postgres_database(server)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    print(f"chaos: seed {seed} (replay with --seed {seed}); work dir {work_dir}", flush=True)
    setup_django(database_url)

    from django.core.management import call_command
    from django.db import connection

    from tests.chaos import checker, scenarios
    from tests.chaos.harness import Load, Run, RunConfig
    from tests.servers import PostgresServer

    vendor = connection.vendor
    available = scenarios.for_database(vendor)
    if args.scenario == "all":
        chosen = available
    else:
        chosen = [scenarios.get(name) for name in args.scenario.split(",") if name]
        skipped = [s.name for s in chosen if s not in available]
        if skipped:
            print(f"chaos: skipping on {vendor} (PostgreSQL only): {', '.join(skipped)}")
        chosen = [s for s in chosen if s in available]
    pg_server = PostgresServer() if vendor == "postgresql" and "TEST_PG_DATA" in os.environ else None
    if any(s.name == "pg_restart" for s in chosen) and pg_server is None:
        sys.exit("pg_restart stops the server: run under `python -m tests.services --`.")
    scenarios.SCENARIOS["pg_restart"].outage_s = args.outage

    reports = []
    for scenario in chosen:
        # Workers wait for missing migrations instead of serving: apply any first.
        call_command("migrate", verbosity=0)
        empty_tables()
        config = RunConfig(seed=seed, work_dir=work_dir / scenario.name, database_url=database_url,
                           load=Load(jobs=args.jobs), workers=args.workers,
                           concurrency=args.concurrency, duration_s=args.duration,
                           pg_server=pg_server, burners=args.burners,
                           worker_db_options=dict(o.split("=", 1) for o in args.worker_db_option))
        run = Run(config)
        started = time.monotonic()
        try:
            report = run.execute(scenario)
        except scenarios.ScenarioSkipped as exc:
            print(f"chaos: skipping {scenario.name}: {exc}", flush=True)
            continue
        finally:
            run.cleanup()
        reports.append(report)
        print(report.describe(), flush=True)
        print(f"  ({time.monotonic() - started:.0f} s)", flush=True)

    command = "python -m tests.chaos.run " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"\nseed {seed} on {vendor}: {command}")
    print(checker.table(reports))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"seed": seed, "database": vendor, "command": command,
             "rows": [r.row() for r in reports],
             "violations": {r.scenario: r.violations() for r in reports}}, indent=2))
    broken = [r.scenario for r in reports if not r.ok()]
    if broken:
        print(f"guarantees broken in: {', '.join(broken)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
