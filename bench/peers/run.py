"""The harness: a throw-away PostgreSQL, every chosen peer, every figure, the report.

    python -m bench.peers [--quick] [--systems raw,procrastinate] [--repeat N] [--jobs N]
"""

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers import report as reports
from bench.peers.base import PEERS, load_peer
from bench.peers.database import Server
from bench.peers.workers import REPO_ROOT
from tests.services import start_postgres

GROUPS = ("serial", "atomic", "bulk", "latency")
# A group only some peers can run, by the Peer attribute that says so.
NEEDS = {"atomic": "has_transaction"}
TRIAL_TIMEOUT_S = 900
TRIAL_STOP_GRACE_S = 15
DEFAULT_JSON = REPO_ROOT / "var" / "bench" / "peers.json"
LOG_DIR = REPO_ROOT / "var" / "bench" / "peers-logs"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description="Measure Haulage and other job queues with one method on a throw-away PostgreSQL.",
    )
    parser.add_argument("--systems", default=",".join(PEERS),
                        help=f"comma-separated, from: {', '.join(PEERS)} (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 500 jobs, 40 latency jobs, one repetition")
    parser.add_argument("--repeat", type=int, help="runs per figure (default 3, quick 1)")
    parser.add_argument("--jobs", type=int, help="jobs per enqueue/throughput figure (default 5000)")
    parser.add_argument("--latency-jobs", type=int, help="jobs per latency figure (default 200)")
    parser.add_argument("--rate", type=float, default=20.0, help="latency jobs per second")
    parser.add_argument("--bulk-size", type=int, default=1000, help="jobs per bulk enqueue call")
    parser.add_argument("--conn-max-age", type=int, default=60,
                        help="CONN_MAX_AGE of the Django peers, s (Django's default 0 reconnects "
                             "per job; default: 60)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where the JSON goes")
    options = parser.parse_args(argv)
    options.systems = [name.strip() for name in options.systems.split(",") if name.strip()]
    unknown = [name for name in options.systems if name not in PEERS]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    defaults = (1, 500, 40) if options.quick else (3, 5000, 200)
    options.repeat = options.repeat or defaults[0]
    options.jobs = options.jobs or defaults[1]
    options.latency_jobs = options.latency_jobs or defaults[2]
    return options


def run_trial(name, action, database_url, options, log_prefix):
    out = Path(f"{log_prefix}.json")
    argv = [
        sys.executable, "-m", "bench.peers.trial", name, action,
        "--database-url", database_url, "--out", str(out), "--log-prefix", str(log_prefix),
        "--jobs", str(options.jobs), "--bulk-size", str(options.bulk_size),
        "--latency-jobs", str(options.latency_jobs), "--rate", str(options.rate),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
           "BENCH_PEERS_CONN_MAX_AGE": str(options.conn_max_age)}
    with Path(f"{log_prefix}.log").open("wb") as log:
        trial = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            trial.wait(TRIAL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _stop_trial(trial)
            return {"error": f"the trial ran longer than {TRIAL_TIMEOUT_S} s"}
        except BaseException:
            _stop_trial(trial)
            raise
    if not out.exists():
        return {"error": f"the trial wrote no result; see {log_prefix}.log"}
    return json.loads(out.read_text())


def _stop_trial(trial):
    # TERM first: the trial then stops its worker processes, which live in
    # process groups of their own and would outlive a KILLed trial.
    trial.terminate()
    try:
        trial.wait(TRIAL_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        trial.kill()
        trial.wait()


def versions(peer_class):
    found = {}
    for package in peer_class.packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def prepare(server, name, options):
    """A peer's entry in the report, and its template database built (or why it cannot run)."""
    peer_class = load_peer(name)
    system = {"title": peer_class.title, "versions": versions(peer_class),
              "configuration": peer_class.configuration, "has_bulk": peer_class.has_bulk,
              "has_transaction": peer_class.has_transaction,
              "runs": [], "errors": [], "median": {}}
    template = _template(name)
    server.drop(template)
    outcome = run_trial(name, "prepare", server.create(template), options,
                          LOG_DIR / f"{_stem(name)}-prepare")
    if "figures" not in outcome:
        server.drop(template)
        if "error" in outcome:
            # A peer that cannot even build its schema is a failure, not a gap.
            system["errors"].append({"run": 0, "group": "prepare", "message": outcome["error"]})
            print(outcome["error"], flush=True)
        system["unavailable"] = outcome.get("unavailable") or outcome["error"].strip().splitlines()[-1]
        print(f"{peer_class.title}: not measured: {system['unavailable']}", flush=True)
    return system


def measure_run(server, name, system, repetition, options):
    """Every figure group of one peer, once: run `repetition` of `options.repeat`."""
    peer_class = load_peer(name)
    figures = {}
    for group in GROUPS:
        if group in NEEDS and not getattr(peer_class, NEEDS[group]):
            continue
        label = f"{peer_class.title} run {repetition}/{options.repeat} {group}"
        outcome = measure_group(server, name, group, _template(name), options,
                                LOG_DIR / f"{_stem(name)}-{repetition}-{group}", label)
        if "figures" in outcome:
            figures.update(outcome["figures"])
        else:
            system["errors"].append({"run": repetition, "group": group,
                                     "message": outcome.get("error") or outcome["unavailable"]})
    system["runs"].append(figures)


def measure_all(server, options):
    """Every peer's entries. The peers take turns, one run each, so that a machine whose speed
    drifts over the hour (it does: docs/performance.md) slows each of them alike."""
    systems = {name: prepare(server, name, options) for name in options.systems}
    measured = [name for name, system in systems.items() if "unavailable" not in system]
    for repetition in range(1, options.repeat + 1):
        for name in measured:
            measure_run(server, name, systems[name], repetition, options)
    for name in measured:
        server.drop(_template(name))
        systems[name]["median"] = reports.medians(systems[name]["runs"])
    return systems


def _stem(name):
    return name.replace("-", "_")


def _template(name):
    return f"bench_{_stem(name)}_template"


def measure_group(server, name, group, template, options, log_prefix, label):
    """One trial in a fresh copy of the template, with a line of progress."""
    started = time.monotonic()
    database = "bench_" + log_prefix.name.replace("-", "_")
    url = server.create(database, template=template)
    try:
        outcome = run_trial(name, group, url, options, log_prefix)
    finally:
        server.drop(database)
    elapsed_s = time.monotonic() - started
    if "figures" in outcome:
        shown = ", ".join(f"{key} {value:,.1f}" for key, value in outcome["figures"].items()
                          if value is not None)
        print(f"{label}: {shown} ({elapsed_s:.0f} s)", flush=True)
    else:
        message = (outcome.get("error") or outcome.get("unavailable", "")).strip()
        print(f"{label}: FAILED ({elapsed_s:.0f} s), see {log_prefix}.log\n{message}", flush=True)
    return outcome


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    # TERM unwinds like Ctrl+C, so the trials, their workers and the server stop.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    # Taken before any of our own processes run: other work on the machine
    # shows up in every figure, so the report says how much there was.
    load_before = os.getloadavg()[0]
    shutil.rmtree(LOG_DIR, ignore_errors=True)
    LOG_DIR.mkdir(parents=True)
    root = Path(tempfile.mkdtemp(prefix="haulage-bench-peers-"))
    os.chmod(root, 0o755)  # the postgres user must reach its data folder inside
    stop = None
    try:
        stop, env = start_postgres(root)
        if stop is None:
            sys.exit("PostgreSQL's server binaries were not found (set PGBIN, or install "
                     "postgresql): the peers cannot be measured without one.")
        server = Server(env["TEST_PG_PORT"])
        report = {
            "method": {"jobs": options.jobs, "bulk_size": options.bulk_size,
                       "latency_jobs": options.latency_jobs, "rate": options.rate,
                       "repeat": options.repeat, "quick": options.quick,
                       "conn_max_age_s": options.conn_max_age},
            "postgres": {"version": server.version(), "settings": server.settings()},
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_1m_before": round(load_before, 2),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "systems": {},
        }
        started = time.monotonic()
        report["systems"] = measure_all(server, options)
        report["elapsed_s"] = round(time.monotonic() - started, 1)
        server.close()
    finally:
        if stop is not None:
            stop()
        shutil.rmtree(root, ignore_errors=True)
    reports.write_json(report, options.json)
    print()
    print(reports.markdown(report))
    print(f"\n({report['elapsed_s']:.0f} s; JSON in {options.json}, logs in {LOG_DIR})")
    failed = any(system["errors"] for system in report["systems"].values())
    return 1 if failed else 0
