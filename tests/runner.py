"""Run the suite on PostgreSQL and on SQLite, in two phases.

    python -m tests.runner [--db postgres|pgbouncer|sqlite] [pytest arguments...]

(`scripts/run-tests` under `python -m tests.services --`, which starts the
throw-away servers; `make test ARGS=...` passes its arguments here.)

1. **Parallel**: both databases at once, each spread over pytest-xdist
   workers (`TEST_WORKERS` each; tests/isolation.py gives every worker its own
   database, folder and Redis database). Most tests wait on subprocesses,
   sockets and sleeps, so a 2-core machine runs several at a time.
2. **Serial**: the tests marked `serial`, one at a time per database, with
   no parallel test running: they time recovery bounds and supervisor
   reactions, restart the PostgreSQL server everyone shares, or are the chaos
   small tier. The two databases' serial streams run side by side: one such
   test uses about a quarter of this 2-core machine (the PostgreSQL stream:
   122 s of CPU in 248 s), so two at once still leave half of it idle, and
   none of them touches the other database's server, Redis or processes.

PostgreSQL runs every layer; SQLite runs the database layers again, less the
tests marked `postgres`, `dbless` or `once` (those ran on PostgreSQL); the
pgbouncer pass runs the files of POOLED_LAYERS once more on PostgreSQL, every
connection through PgBouncer in transaction pooling. Path arguments replace
the default layers on every database. A database none of
whose phases collected a test fails the run (pytest's exit code 5), so a run
cannot pass by running nothing.
"""

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_TESTS_COLLECTED = 5


@dataclass
class Database:
    name: str
    url: str
    layers: list
    marks: str  # which tests this database runs
    redis_db_base: int  # tests/isolation.py: a range of Redis databases of its own
    env: dict = field(default_factory=dict)  # more environment for its pass
    args: list = field(default_factory=list)  # more pytest arguments for its pass
    extra: bool = False  # a re-run of a subset: only when asked for, or on the default layers
    codes: list = field(default_factory=list)


def default_workers():
    # One more than the cores per database, two databases at once: the tests
    # wait on processes they start, but starting Python is CPU, and more
    # workers than this only makes every start slower.
    return max(2, (os.cpu_count() or 1) + 1)


def split_arguments(argv):
    """(databases asked for, user's -m expression, path arguments, the other pytest arguments)."""
    wanted, markexpr, paths, rest = None, None, [], []
    args = iter(argv)
    for arg in args:
        if arg == "--db":
            wanted = next(args, "")
        elif arg.startswith("--db="):
            wanted = arg.split("=", 1)[1]
        elif arg in ("-m", "--markexpr"):
            markexpr = next(args, "")
        elif not arg.startswith("-") and Path(ROOT, arg.split("::")[0]).exists():
            paths.append(arg)
        else:
            rest.append(arg)
    return wanted, markexpr, paths, rest


# What the pgbouncer pass runs: claims and completions, limits and rates, workflows, fencing,
# the Tasks API, the pooler's own.
POOLED_LAYERS = [
    "tests/integration/test_claim.py",
    "tests/integration/test_claim_postgres.py",
    "tests/integration/test_completion_postgres.py",
    "tests/integration/test_limits.py",
    "tests/integration/test_rates.py",
    "tests/integration/test_dependencies.py",
    "tests/integration/test_outcomes.py",
    "tests/integration/test_tasks_backend.py",
    "tests/integration/test_pooler.py",
]


def databases(var_dir, paths):
    found = []
    postgres_url = os.environ.get("TEST_POSTGRES_URL")
    if postgres_url:
        found.append(Database("postgres", postgres_url, paths or ["tests"], "", 0))
    pooled_url = os.environ.get("TEST_PGBOUNCER_URL")
    if postgres_url and pooled_url:
        # The engine's promises again, every connection through PgBouncer in
        # transaction pooling, LISTEN on a direct one (no database name: the
        # test database's).
        found.append(Database(
            "pgbouncer", pooled_url, paths or POOLED_LAYERS, "not dbless and not once", 16,
            env={"DATABASE_POOLER": "transaction",
                 "JOBS_LISTEN_DATABASE_URL": postgres_url.rsplit("/", 1)[0]},
            # Kept, not dropped at the end: the pool still holds server
            # connections to it, and PostgreSQL refuses to drop a database in use.
            args=["--reuse-db"], extra=True,
        ))
    found.append(Database(
        "sqlite", f"sqlite:///{var_dir / 'sqlite' / 'haulage.sqlite3'}",
        paths or ["tests/integration", "tests/acceptance", "tests/chaos", "tests/fuzz"],
        "not postgres and not dbless and not once", 8,
    ))
    return found


def markexpr(*parts):
    return " and ".join(f"({part})" for part in parts if part)


def pytest_command(database, phase, marks, rest, var_dir, workers):
    reports = var_dir / "reports"
    reports.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "pytest", "--durations=15",
               f"--junitxml={reports / f'{database.name}-{phase}.xml'}",
               "-m", marks, *database.layers, *database.args, *rest]
    if phase == "parallel":
        # worksteal: a worker that runs out takes half of a busy one's
        # remaining tests, so one long file does not leave the rest idle.
        command[3:3] = ["-n", str(workers), "--dist", "worksteal"]
    return command


def environment(database, var_dir):
    own = var_dir / database.name
    own.mkdir(exist_ok=True)
    return {**os.environ, "DATABASE_URL": database.url, "HAULAGE_VAR_DIR": str(own),
            "TEST_REDIS_DB_BASE": str(database.redis_db_base), **database.env}


def run_prefixed(command, env, prefix):
    """Start `command`, copying its output lines behind `prefix`; returns (process, copier thread)."""
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)

    def copy():
        for line in proc.stdout:
            sys.stdout.write(f"{prefix}{line}")
            sys.stdout.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return proc, thread


def run_phase(chosen, phase, user_marks, rest, var_dir, workers):
    """Run `phase` on every chosen database at once, their output prefixed by its name."""
    started = []
    for database in chosen:
        marks = markexpr(database.marks, user_marks, "serial" if phase == "serial" else "not serial")
        command = pytest_command(database, phase, marks, rest, var_dir, workers)
        prefix = f"[{database.name}] " if len(chosen) > 1 else ""
        started.append((database, *run_prefixed(command, environment(database, var_dir), prefix)))
    for database, proc, thread in started:
        database.codes.append(proc.wait())
        thread.join()


def failures(var_dir, database):
    """The failed or erroring tests of both phases, read back from the JUnit reports."""
    found = []
    for report in sorted((var_dir / "reports").glob(f"{database.name}-*.xml")):
        try:
            cases = ET.parse(report).iter("testcase")
        except ET.ParseError:
            found.append(f"{report.name}: unreadable report")
            continue
        for case in cases:
            for bad in case:
                if bad.tag in ("failure", "error"):
                    message = (bad.get("message") or "").splitlines()[:1]
                    found.append(f"{case.get('classname')}::{case.get('name')}"
                                 f" ({bad.tag}){': ' + message[0][:200] if message else ''}")
                    found.extend(f"  {line[:200]}" for line in complaints(case))
    return found


COMPLAINT = re.compile(r"\b(ERROR|CRITICAL|WARNING|Traceback)\b")


def complaints(case, most=4):
    """The last lines a failed test's processes logged as errors or warnings (its workers' logs
    are in its captured output): often the why of a failure a browser only saw time out."""
    output = "\n".join(part.text or "" for part in case if part.tag in ("system-out", "system-err"))
    return [line for line in output.splitlines() if COMPLAINT.search(line)][-most:]


def choose(everything, wanted, paths):
    """The passes to run: the one `--db` names, else all but an extra one on narrowed paths."""
    return [d for d in everything
            if wanted == d.name or (wanted is None and not (d.extra and paths))]


def verdict(database, *, asked=False):
    """0 when every phase passed and at least one ran a test; otherwise a failing exit code.

    An extra pass (a re-run of a few files) that a -k or -m leaves empty is no
    failure, unless it was asked for by name.
    """
    ran = [code for code in database.codes if code != NO_TESTS_COLLECTED]
    if not ran:
        return 0 if database.extra and not asked else NO_TESTS_COLLECTED
    return max(ran)


def main(argv):
    wanted, user_marks, paths, rest = split_arguments(argv)
    var_dir = Path(os.environ.get("HAULAGE_VAR_DIR") or tempfile.mkdtemp(prefix="haulage-test-"))
    var_dir.mkdir(parents=True, exist_ok=True)
    workers = int(os.environ.get("TEST_WORKERS") or default_workers())
    everything = databases(var_dir, paths)
    if os.environ.get("REQUIRE_SERVICES") == "1" and everything[0].name != "postgres":
        print("REQUIRE_SERVICES=1 but no PostgreSQL was started.", file=sys.stderr)
        return 1
    chosen = choose(everything, wanted, paths)
    if not chosen:
        print(f"--db must name one of: {', '.join(d.name for d in everything)}.", file=sys.stderr)
        return 2
    began = time.monotonic()
    print(f"=== Parallel phase: {', '.join(d.name for d in chosen)} at once, "
          f"{workers} workers each", flush=True)
    run_phase(chosen, "parallel", user_marks, rest, var_dir, workers)
    print(f"=== Serial phase: {', '.join(d.name for d in chosen)} side by side, "
          "one test at a time each", flush=True)
    run_phase(chosen, "serial", user_marks, rest, var_dir, 1)
    print(f"=== {time.monotonic() - began:.0f} s in all; reports in {var_dir / 'reports'}")
    status = 0
    for database in chosen:
        code = verdict(database, asked=wanted == database.name)
        if code == NO_TESTS_COLLECTED:
            print(f"=== {database.name}: no test was collected: that is a failure here.")
        elif code:
            print(f"=== {database.name}: FAILED (exit codes {database.codes})")
            # Repeated last, where a CI log's tail shows it.
            for line in failures(var_dir, database):
                print(f"===   {line}")
        status = max(status, code)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
