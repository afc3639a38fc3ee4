"""The chaos harness: real workers, a load, a fault scenario, then the checker's verdict.

    run = Run(RunConfig(seed=7, work_dir=..., database_url=..., load=Load(jobs=300)))
    report = run.execute(scenarios.get("worker_kill"))
    print(report.describe())

One run, top to bottom:

1. start `workers` real `manage.py runworker` processes with short timings
   (lease 3 s, heartbeat 1 s, rescue 1 s, poll 0.5 s), each through its own
   TCP proxy when the scenario needs one; for a scenario with CV jobs, a Redis
   server of the run's own and `cv_workers` `manage.py runcvworker`
   processes; a process manager restarts any that dies, as systemd or
   Kubernetes would;
2. start the load generator (seeded: the same seed enqueues the same jobs)
   and the sampler (RUNNING jobs per concurrency key, every 200 ms);
3. inject the scenario's faults for `duration_s`, then heal;
4. wait for the queue to drain, stop the workers, look for survivors;
5. hand the evidence to the checker.

The harness process is a Django process on the same database as the workers;
it enqueues through `jobs.services` like any web request would. It imports
tests.chaos.kinds only when a run starts: importing it registers the chaos
kinds, which no other test should see.
"""

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

# Error, not DatabaseError: a closed connection raises InterfaceError, its sibling.
from django.db import Error, close_old_connections, connection

from tests import freezing
from tests.chaos import checker, procs
from tests.chaos.proxy import Proxy

log = logging.getLogger("chaos")

ROOT = Path(__file__).resolve().parents[2]
RUN_ENV = "CHAOS_RUN"  # every process of a run carries its id, so leftovers can be found
APPLICATION_NAME = "chaos-worker"  # the workers' PostgreSQL sessions: chaos-worker-<slot>


@dataclass(frozen=True)
class Timings:
    """The engine's clock for chaos runs: short, so a recovery takes seconds."""

    lease_s: float = 3
    heartbeat_s: float = 1
    rescue_s: float = 1
    poll_s: float = 0.5
    shutdown_grace_s: float = 2
    # A failed attempt's retry comes sooner than the 5 s default, so a run
    # drains in seconds; the backoff is not what these scenarios test.
    backoff_base_s: float = 0.5

    @property
    def recovery_bound_s(self):
        """The documented bound: a dead worker's jobs run again within lease + rescue + poll
        + the kind's backoff (the chaos kinds' longest)."""
        from tests.chaos.kinds import BACKOFF_MAX_S

        return self.lease_s + self.rescue_s + self.poll_s + BACKOFF_MAX_S

    # The CV fleet's clock: a dead CV worker's messages go back after the TTL.
    cv_heartbeat_s: float = 1
    cv_heartbeat_ttl_s: float = 3

    def env(self):
        return {
            "CV_HEARTBEAT_INTERVAL_S": str(self.cv_heartbeat_s),
            "CV_HEARTBEAT_TTL_S": str(self.cv_heartbeat_ttl_s),
            "CV_SHUTDOWN_GRACE_S": str(self.shutdown_grace_s),
            "JOBS_LEASE_SECONDS": str(self.lease_s),
            "JOBS_HEARTBEAT_SECONDS": str(self.heartbeat_s),
            "JOBS_RESCUE_INTERVAL_SECONDS": str(self.rescue_s),
            "JOBS_POLL_SECONDS": str(self.poll_s),
            "JOBS_SHUTDOWN_GRACE_SECONDS": str(self.shutdown_grace_s),
            "JOBS_PROGRESS_INTERVAL_SECONDS": "0",
            "JOBS_BACKOFF_BASE_SECONDS": str(self.backoff_base_s),
        }


# Measured recoveries include what the bound leaves out: the reaper looks on a
# 0.5 s tick (so an interval of 1 s means up to 1.5 s), a child process needs
# a moment to start, and a busy 2-core machine schedules late.
RECOVERY_SLACK_S = 1.5


def user_limit(user):
    """Per-user limits of the load: even users may run one job at a time, odd ones two."""
    return 1 if user % 2 == 0 else 2


@dataclass(frozen=True)
class Load:
    """What the load generator enqueues: a seeded mix of ledger jobs."""

    jobs: int = 200
    process_share: float = 0.03  # in a supervised child (costs a Python start each)
    keyed_share: float = 0.3  # carrying a user:N key with limit 1 or 2
    users: int = 8
    long_share: float = 0.1  # long enough to be caught mid-run by a fault
    short_s: tuple = (0.02, 0.3)
    long_s: tuple = (1.0, 3.0)
    process_s: tuple = (0.3, 1.5)
    single_share: float = 0.2  # enqueued one by one; the rest in batches
    cv_share: float = 0.0  # redis mode, run by the CV fleet (needs a run with Redis)
    cv_s: tuple = (0.1, 1.5)

    def plan(self, rng):
        """[(kind, payload, options)] in enqueue order."""
        from tests.chaos import kinds

        specs = []
        for n in range(self.jobs):
            process = rng.random() < self.process_share
            # Drawn only when asked for, so older scenarios keep their seeded plans.
            cv = not process and self.cv_share > 0 and rng.random() < self.cv_share
            if cv:
                seconds = rng.uniform(*self.cv_s)
            elif process:
                seconds = rng.uniform(*self.process_s)
            elif rng.random() < self.long_share:
                seconds = rng.uniform(*self.long_s)
            else:
                seconds = rng.uniform(*self.short_s)
            payload = {"n": n, "seconds": round(seconds, 3)}
            options = {}
            if rng.random() < self.keyed_share:
                user = rng.randrange(self.users)
                payload["keys"] = [f"user:{user}"]
                options["limits"] = {f"user:{user}": user_limit(user)}
            kind = kinds.CV if cv else kinds.PROCESS if process else kinds.INLINE
            specs.append((kind, payload, options))
        return specs

    def limits(self):
        return {f"user:{u}": user_limit(u) for u in range(self.users)}


@dataclass
class RunConfig:
    seed: int
    work_dir: Path
    database_url: str  # the database the workers use (the harness's own connection is Django's)
    load: Load = field(default_factory=Load)
    workers: int = 4
    concurrency: int = 6
    duration_s: float = 20  # the fault window; the load is enqueued over its first 80 %
    timings: Timings = field(default_factory=Timings)
    restart_delay_s: float = 0.5
    drain_limit_s: float = 240
    survivor_grace_s: float = 3
    pg_server: object = None  # tests.servers.PostgresServer, for scenarios that stop PostgreSQL
    worker_db_options: dict = field(default_factory=dict)  # extra libpq parameters for workers
    worker_env: dict = field(default_factory=dict)  # extra environment for workers (their settings)
    burners: int = 2  # busy processes of the CPU contention scenario
    cv_workers: int = 2  # runcvworker processes, in runs whose load has CV jobs
    cv_concurrency: int = 4
    redis_bin: str | None = None  # redis-server for runs with CV jobs (a server of their own)


def postgres_url(url, *, proxy=None, **params):
    """`url` pointed at `proxy` (when given), with extra libpq parameters in its query."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if proxy is not None:
        user = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
        netloc = f"{user}127.0.0.1:{proxy.port}"
    query = "&".join(filter(None, [parts.query, urlencode(params)]))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def durable_commits(on):
    """Make the database's commits survive a crash of PostgreSQL (or restore the server's default).

    The throw-away test server runs with synchronous_commit=off for speed: an
    immediate stop then forgets the last acknowledged commits (enqueues and
    claims alike), and the checker would rightly report jobs lost or run
    twice under two valid leases. Production keeps PostgreSQL's default (on),
    and so do these runs. No-op on SQLite.
    """
    if connection.vendor != "postgresql":
        return
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        if on:
            cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit = on")
        else:
            cursor.execute(f"ALTER DATABASE {name} RESET synchronous_commit")
    connection.close()  # the setting applies to sessions that start after it


# --- Workers and their process manager ------------------------------------------------------


class WorkerProcess:
    """One runworker (or runcvworker) process; `slot` survives restarts, `name` is unique."""

    def __init__(self, slot, generation, proc, log_path, prefix="chaos"):
        self.slot = slot
        self.generation = generation
        self.name = f"{prefix}-{slot}-{generation}"
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.frozen = False  # SIGSTOPped by a fault
        self.killed = False  # SIGKILLed by a fault (it may take a moment to be gone)
        self.started_mono = time.monotonic()
        self._serving = False

    def alive(self):
        return self.proc.poll() is None

    def serving(self):
        """Whether it has said it serves its queues: registered, its reaper running."""
        if not self._serving:
            try:
                self._serving = "serving queues" in self.log_path.read_text()
            except OSError:
                pass
        return self._serving


class Fleet:
    """The workers of a run and the process manager that restarts them."""

    def __init__(self, run):
        self.run = run
        self.lock = threading.Lock()
        self.workers = {}  # slot -> WorkerProcess
        self.cv_workers = {}  # slot -> WorkerProcess of a runcvworker
        self.generations = Counter()
        self.exits = []  # (name, returncode)
        self.ended = []  # (pid, wall) of every process found dead
        self.proxies = {}  # slot -> Proxy
        self.stopping = threading.Event()
        self.manager = threading.Thread(target=self._manage, name="chaos-fleet", daemon=True)

    def start(self, proxied, cv_workers=0):
        for slot in range(self.run.config.workers):
            if proxied:
                self.proxies[slot] = Proxy(self.run.pg_address()).start()
            self._spawn(slot)
        for slot in range(cv_workers):
            self._spawn_cv(slot)
        self.manager.start()

    def _env(self):
        # A MEDIA_ROOT of the run's own: CV results are files named by job id,
        # and ids start again in every fresh database.
        env = {**os.environ, **self.run.config.timings.env(),
               "CHAOS_LEDGER_DIR": str(self.run.ledger_dir), RUN_ENV: self.run.id,
               "MEDIA_ROOT": str(self.run.media_root), **self.run.config.worker_env,
               **self.run.extra_env}
        env.pop("REDIS_URL", None)
        if self.run.redis is not None:
            env["REDIS_URL"] = self.run.redis.url
        return env

    def _spawn_cv(self, slot):
        """A CV worker with a stable id: a restarted one takes back what its predecessor held."""
        key = f"cv-{slot}"
        self.generations[key] += 1
        generation = self.generations[key]
        log_path = self.run.logs / f"cvworker-{slot}-{generation}.log"
        from tests.chaos import kinds

        env = {**self._env(), "DATABASE_URL": self.run.worker_database_url(slot),
               "JOBS_HANDLER_MODULES": "tests.chaos.cvkinds"}
        with open(log_path, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "runcvworker", "--concurrency",
                 str(self.run.config.cv_concurrency), "--worker-id", f"chaos-cv-{slot}",
                 "--types", kinds.CV_TYPE],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        with self.lock:
            self.cv_workers[slot] = WorkerProcess(slot, generation, proc, log_path, prefix="chaos-cv")

    def _spawn(self, slot):
        config = self.run.config
        self.generations[slot] += 1
        generation = self.generations[slot]
        log_path = self.run.logs / f"worker-{slot}-{generation}.log"
        proxy = self.proxies.get(slot)
        env = {
            **self._env(),
            "DATABASE_URL": self.run.worker_database_url(slot, proxy),
            "JOBS_HANDLER_MODULES": "tests.chaos.kinds",
        }
        with open(log_path, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--no-scheduler",
                 "--concurrency", str(config.concurrency),
                 "--worker-id", f"chaos-{slot}-{generation}", "--queues", ",".join(self.run.queues),
                 "--kinds", ",".join(self.run.kinds)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        with self.lock:
            self.workers[slot] = WorkerProcess(slot, generation, proc, log_path)

    def _manage(self):
        """Restart a worker that died, after a pause, like a process manager."""
        dead_since = {}
        while not self.stopping.wait(0.1):
            with self.lock:
                current = [(w, self._spawn) for w in self.workers.values()]
                current += [(w, self._spawn_cv) for w in self.cv_workers.values()]
            for worker, respawn in current:
                if worker.alive():
                    continue
                key = worker.name.rsplit("-", 1)[0]
                if key not in dead_since:
                    dead_since[key] = time.monotonic()
                    self.exits.append((worker.name, worker.proc.returncode))
                    self.ended.append((worker.pid, time.time()))
                elif time.monotonic() - dead_since[key] >= self.run.config.restart_delay_s:
                    del dead_since[key]
                    if not self.stopping.is_set():
                        respawn(worker.slot)

    def live(self, serving_for_s=0.0):
        """Workers running now, not frozen, and started at least `serving_for_s` ago."""
        started_before = time.monotonic() - serving_for_s
        with self.lock:
            return [w for w in self.workers.values()
                    if w.alive() and not w.frozen and not w.killed
                    and w.started_mono <= started_before]

    def targets(self, serving_for_s):
        """Workers a fault may take out of service: serving ones, while another serving one
        would be left. The bound promises recovery by a survivor; with none left, a job
        would wait for a restarted worker to import Django, which is no recovery."""
        serving = [w for w in self.live(serving_for_s) if w.serving()]
        return serving if len(serving) >= 2 else []

    def signal(self, worker, signum):
        # Our own unreaped child: its pid cannot have been reused.
        if not worker.alive():
            return False
        worker.proc.send_signal(signum)
        if signum == signal.SIGKILL:
            worker.killed = True
        return True

    def freeze(self, worker):
        """SIGSTOP `worker` between SQLite write transactions (tests/freezing.py)."""
        if not worker.alive():
            return False
        try:
            freezing.freeze(worker.proc.pid)
        except (AssertionError, ProcessLookupError, FileNotFoundError):
            return False
        return True

    def stop(self):
        """Graceful stop (SIGTERM), then SIGKILL for any worker that does not go in time."""
        self.stopping.set()
        if self.manager.is_alive():
            self.manager.join(5)
        with self.lock:
            current = list(self.workers.values()) + list(self.cv_workers.values())
        for worker in current:
            if worker.alive():
                worker.proc.send_signal(signal.SIGCONT)
                worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for worker in current:
            try:
                worker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait(10)
        for proxy in self.proxies.values():
            proxy.close()

    def logs(self):
        return sorted(self.run.logs.glob("*worker-*.log"))


# --- Load and sampling ------------------------------------------------------------------


class LoadGenerator(threading.Thread):
    """Enqueues the planned jobs over `spread_s`, in batches and one by one.

    Every call's answer is recorded: a success acknowledges its jobs (each
    must exist afterwards); an error is a refusal, retried on the next tick.
    """

    TICK_S = 0.25

    def __init__(self, run, specs, spread_s):
        super().__init__(name="chaos-load", daemon=True)
        self.owner = run
        self.specs = list(specs)
        self.spread_s = spread_s
        self.rng = random.Random(run.config.seed + 1)
        self.acked = set()  # the payloads' "n" of every job an enqueue call returned for
        self.submitted = set()  # the "n" of every download submission that answered
        self.calls = []  # (seconds, error text or "")
        self.locked = 0
        self.crash = None  # a harness bug, reported instead of a silently short load
        self.stop = threading.Event()

    def run(self):
        from jobs import services

        try:
            self._feed(services)
        except Exception as exc:  # noqa: BLE001 - surfaced by Run.execute
            self.crash = exc
        finally:
            connection.close()

    def _feed(self, services):
        start = time.monotonic()
        waiting = list(self.specs)
        total = len(waiting)
        while waiting and not self.stop.is_set():
            elapsed = time.monotonic() - start
            due = total if elapsed >= self.spread_s else int(total * elapsed / self.spread_s) + 1
            due = max(0, due - (total - len(waiting)))
            batch, waiting = waiting[:due], waiting[due:]
            refused = []
            while batch:
                size = 1 if self.rng.random() < self.owner.config.load.single_share else 20
                part, batch = batch[:size], batch[size:]
                if not self._enqueue(services, part):
                    refused += part
            waiting = refused + waiting
            self.stop.wait(self.TICK_S)

    def _enqueue(self, services, part):
        from tests.chaos import downloads

        fetches = [spec for spec in part if spec[0] == downloads.KIND]
        if fetches:
            # One download_submit per download, as a web request makes it.
            rest = [spec for spec in part if spec[0] != downloads.KIND]
            done = all([self._submit(payload) for _kind, payload, _options in fetches])
            return (self._enqueue(services, rest) if rest else True) and done
        began = time.monotonic()
        try:
            if len(part) == 1:
                kind, payload, options = part[0]
                services.enqueue(kind, payload, **options)
            else:
                services.enqueue_many(part)
        except Error as exc:
            self.calls.append((time.monotonic() - began, f"{type(exc).__name__}: {exc}".strip()))
            if "database is locked" in str(exc):
                self.locked += 1
            reset_connection()
            return False
        self.calls.append((time.monotonic() - began, ""))
        self.acked.update(payload["n"] for _kind, payload, _options in part)
        return True

    def _submit(self, payload):
        began = time.monotonic()
        try:
            self.owner.downloads.submit(payload)
        except Error as exc:
            self.calls.append((time.monotonic() - began, f"{type(exc).__name__}: {exc}".strip()))
            reset_connection()
            return False
        self.calls.append((time.monotonic() - began, ""))
        self.submitted.add(payload["n"])
        return True

    def finish(self, timeout_s):
        """Let it enqueue what is left (refused jobs are retried), up to `timeout_s`."""
        self.join(timeout_s)
        self.stop.set()
        self.join(5)


class Sampler(threading.Thread):
    """Looks at RUNNING chaos jobs every `interval_s`, from the database.

    It counts them per concurrency key (a limit must hold in every sample) and
    notes when each claim (job, lease token) was first seen: a claim whose
    process died before it could write to the ledger still shows here.
    """

    def __init__(self, limits, queues, interval_s=0.2):
        super().__init__(name="chaos-sampler", daemon=True)
        self.limits = limits
        self.queues = queues
        self.interval_s = interval_s
        self.samples = 0
        self.violations = []  # (monotonic, key, running, limit)
        self.peak = Counter()
        self.first_seen = {}  # (job, token) -> monotonic
        self.stop = threading.Event()

    def run(self):
        from jobs.models import Job, JobStatus
        from tests.chaos import kinds

        try:
            while not self.stop.wait(self.interval_s):
                try:
                    rows = [(pk, kinds.claim_name(kind, token, attempt), keys)
                            for pk, kind, token, attempt, keys in Job.objects.filter(
                                status=JobStatus.RUNNING, queue__in=self.queues).values_list(
                                "pk", "kind", "lease_token", "attempts", "concurrency_keys")]
                except Error:
                    reset_connection()
                    continue
                # The rows were read before this moment: a sighting is never early.
                now = time.monotonic()
                self.samples += 1
                counts = Counter()
                for pk, token, keys in rows:
                    self.first_seen.setdefault((pk, token), now)
                    counts.update(keys)
                for key, running in counts.items():
                    self.peak[key] = max(self.peak[key], running)
                    if running > self.limits.get(key, running):
                        self.violations.append((round(now, 3), key, running, self.limits[key]))
        finally:
            connection.close()


def reset_connection():
    """Drop a broken connection, so the next query reconnects (e.g. after a PostgreSQL restart)."""
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is dropped either way
        pass
    close_old_connections()


# --- One run ---------------------------------------------------------------------------


class Run:
    """One scenario against real workers; `execute()` returns the checker's report."""

    def __init__(self, config):
        self.config = config
        self.id = uuid.uuid4().hex[:12]
        self.rng = random.Random(config.seed)
        self.dir = Path(config.work_dir)
        self.ledger_dir = self.dir / "ledger"
        self.logs = self.dir / "logs"
        self.faults = []
        self.faults_lock = threading.Lock()
        self.survivors = []
        self.timers = []
        self.stop_faults = threading.Event()
        self.fleet = Fleet(self)
        self.burners = []  # Popen of CPU burners, for the contention scenario
        self.notes = []
        self.redis = None  # RedisServer, for scenarios whose load has CV jobs
        self.extra_env = {}  # more environment for every worker (a scenario's settings)
        self.downloads = None  # tests.chaos.downloads.Downloads, for download scenarios
        self.undo = []  # callables that put the machine back (e.g. unmount a tmpfs), last first
        from tests.chaos import kinds

        self.queues = [kinds.QUEUE]
        # chaos.cv only with a Redis: in local mode a runworker would embed a CV worker.
        self.kinds = [k for k in kinds.KINDS if k != kinds.CV]

    # --- the database, as workers and faults see it --------------------------------

    @property
    def vendor(self):
        return "sqlite" if self.config.database_url.startswith("sqlite") else "postgresql"

    def pg_address(self):
        parts = urlsplit(self.config.database_url)
        return parts.hostname, parts.port or 5432

    def worker_database_url(self, slot, proxy=None):
        """A worker's URL: through `proxy` if given, its sessions named after its slot."""
        url = self.config.database_url
        if self.vendor == "sqlite":
            return url
        return postgres_url(url, proxy=proxy, application_name=f"{APPLICATION_NAME}-{slot}",
                            **self.config.worker_db_options)

    # --- faults report here -------------------------------------------------------------

    def record(self, kind, target, *, pid=None, at=None, detail=None):
        mono, wall = at or (time.monotonic(), time.time())
        fault = checker.Fault(kind=kind, target=target, mono=mono, wall=wall, pid=pid,
                              detail=detail or {})
        with self.faults_lock:
            self.faults.append(fault)
        log.info("fault %s on %s", kind, target)
        return fault

    def worker_lost(self, kind, worker, at, *, check_survivors):
        """Record that `worker` stopped serving at `at`, with the jobs it held then."""
        fault = self.record(kind, worker.name, pid=worker.pid, at=at)
        fault.loses_worker = True
        fault.held = self.held_by(worker.name)
        if check_survivors and fault.held:
            self.check_survivors_later(fault, [f"job-{job}-{token}" for job, token in fault.held])
        return fault

    def held_by(self, worker_name):
        """(job, token) RUNNING under `worker_name` now; None when the database cannot say."""
        from jobs.models import Job, JobStatus
        from tests.chaos import kinds

        try:
            rows = Job.objects.filter(status=JobStatus.RUNNING, worker__name=worker_name)
            return [(pk, kinds.claim_name(kind, token, attempt)) for pk, kind, token, attempt
                    in rows.values_list("pk", "kind", "lease_token", "attempts")]
        except Error:
            reset_connection()
            return None

    def check_survivors_later(self, fault, markers):
        """After the grace, any process still carrying one of `markers` outlived its worker."""
        def look():
            for pid, marker in procs.carrying(RUN_ENV, self.id, markers):
                self.survivors.append((pid, marker, f"{fault.kind} of {fault.target} "
                                                    f"{self.config.survivor_grace_s:.0f} s before"))
        timer = threading.Timer(self.config.survivor_grace_s, look)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def sleep(self, seconds):
        """Sleep, waking early when the fault window closes; False once it has."""
        return not self.stop_faults.wait(max(0.0, seconds))

    # --- the run ---------------------------------------------------------------------

    def execute(self, scenario):
        config = replace(self.config, load=scenario.adjust(self.config.load))
        self.config = config
        for folder in (self.ledger_dir, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        log.info("chaos run %s: scenario %s, seed %d", self.id, scenario.name, config.seed)
        specs = config.load.plan(random.Random(config.seed))
        durable_commits(True)
        scenario.setup(self)
        self.prepare(scenario)
        if self.downloads is not None:
            fetches = self.downloads.load.plan(random.Random(config.seed + 2))
            for n, (_kind, payload, _options) in enumerate(fetches, start=len(specs)):
                payload["n"] = n
            specs = specs + fetches
            random.Random(config.seed + 3).shuffle(specs)
        limits = {**config.load.limits(), **(self.downloads.limits() if self.downloads else {})}
        self.limits = limits
        started_wall = time.time()
        load = sampler = None
        try:
            self.fleet.start(proxied=scenario.needs_proxy,
                             cv_workers=config.cv_workers if self.redis else 0)
            self.wait_for_workers()
            load = LoadGenerator(self, specs, spread_s=config.duration_s * 0.8)
            sampler = Sampler(limits, self.queues)
            load.start()
            sampler.start()
            window_ends = time.monotonic() + config.duration_s
            timer = threading.Timer(config.duration_s, self.stop_faults.set)
            timer.daemon = True
            timer.start()
            # Let the workers start and the first jobs run before the first fault.
            self.sleep(scenario.warmup_s)
            while time.monotonic() < window_ends and not self.stop_faults.is_set():
                scenario.inject(self)
                self.sleep(min(self.rng.uniform(*scenario.pause_s), window_ends - time.monotonic()))
            timer.cancel()
        finally:
            self.stop_faults.set()
            scenario.heal(self)
        load.finish(config.drain_limit_s)
        if load.crash is not None:
            raise RuntimeError("the load generator failed") from load.crash
        drained_s = self.drain()
        for timer in self.timers:
            timer.join()
        self.fleet.stop()
        sampler.stop.set()
        sampler.join(5)
        self.final_sweep()
        evidence = self.collect(load, sampler, scenario)
        checker.save(evidence, self.dir / "evidence.json")
        report = checker.check(evidence, scenario=scenario.name, seed=config.seed,
                               database=self.vendor, bound_s=config.timings.recovery_bound_s,
                               slack_s=RECOVERY_SLACK_S)
        if self.downloads is not None:
            report.notes.append(f"downloads: {len(load.submitted)} submitted, "
                                f"{sum(1 for a in evidence.assets if a.state == 'ready')} of "
                                f"{len(evidence.assets)} assets ready")
        report.notes += self.notes
        report.notes.append(f"drained in {drained_s:.1f} s after the faults stopped; "
                            f"{len(self.fleet.exits)} worker exits; "
                            f"{time.time() - started_wall:.0f} s in all; run {self.id}")
        unacked = len(specs) - len(load.acked) - len(load.submitted)
        if unacked:
            report.notes.append(f"{unacked} planned jobs were never acknowledged")
        return report

    def prepare(self, scenario):
        """Start what the scenario's load needs besides the workers: Redis, the downloads origin."""
        from tests.chaos import downloads, kinds

        if scenario.uses_redis:
            from tests.chaos.redis_server import RedisServer, binary

            if not self.config.redis_bin and not binary():
                raise RuntimeError(f"scenario {scenario.name} needs redis-server, "
                                   "which is not installed")
            self.redis = RedisServer(self.config.redis_bin or binary(), folder=self.dir).start()
            self.kinds = list(kinds.KINDS)
        if scenario.download_load is not None:
            self.downloads = downloads.Downloads(self, scenario.download_load,
                                                 media_root=self.media_root).start()
            self.queues = [kinds.QUEUE, downloads.QUEUE]
            self.kinds = self.kinds + [downloads.KIND]

    @property
    def media_root(self):
        return self.dir / "media"

    def cv_ready(self):
        """How many CV workers have announced themselves (a heartbeat in Redis)."""
        try:
            with self.redis.client() as client:
                return len(client.keys("*:worker:chaos-cv-*"))
        except Exception:  # noqa: BLE001 - a stalled or restarting Redis counts as none ready
            return 0

    def wait_for_workers(self, timeout_s=90):
        """Wait until every worker has registered; a run whose workers never serve proves nothing."""
        from jobs.models import Worker

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            names = {w.name for w in self.fleet.live()}
            try:
                registered = set(Worker.objects.filter(name__in=names, stopped_at__isnull=True)
                                 .values_list("name", flat=True))
            except Error:
                reset_connection()
                registered = set()
            cv_ready = self.redis is None or self.cv_ready() >= len(self.fleet.cv_workers)
            if names and registered == names and cv_ready:
                return
            time.sleep(0.2)
        tails = "\n".join(f"{p.name}: {p.read_text()[-300:]}" for p in self.fleet.logs())
        raise RuntimeError(f"the workers did not all start within {timeout_s} s:\n{tails}")

    def drain(self):
        """Wait until no chaos job is live; give up when nothing finishes for a while."""
        from jobs.models import Job

        began = last_change = time.monotonic()
        previous = None
        stall_s = self.config.timings.recovery_bound_s + 20
        while True:
            try:
                live = Job.objects.live().filter(queue__in=self.queues).count()
            except Error:
                reset_connection()
                live = None
            now = time.monotonic()
            if live == 0:
                return now - began
            if live != previous:
                previous, last_change = live, now
            if now - last_change > stall_s or now - began > self.config.drain_limit_s:
                self.notes.append(f"gave up draining with {live} live jobs")
                return now - began
            time.sleep(0.25)

    def final_sweep(self):
        """After the fleet stopped: every process of this run is a survivor; end it."""
        deadline = time.monotonic() + self.config.survivor_grace_s
        while (left := procs.of_run(RUN_ENV, self.id)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, marker in left:
            self.survivors.append((pid, marker, "alive after the workers stopped"))
            procs.kill_if_of_run(pid, RUN_ENV, self.id)

    def collect(self, load, sampler, scenario):
        from jobs.models import Job, JobEvent

        reset_connection()
        jobs = [
            checker.JobRow(id=pk, status=status, result=result, attempts=attempts,
                           keys=tuple(keys), error_code=code, n=payload.get("n"), kind=kind,
                           error_codes=tuple(e.get("code", "") for e in errors or []))
            for pk, status, result, attempts, keys, code, payload, kind, errors in Job.objects.filter(
                queue__in=self.queues).values_list("pk", "status", "result", "attempts",
                                                   "concurrency_keys", "error_code", "payload",
                                                   "kind", "errors")
        ]
        events = [
            checker.Event(job=job_id, kind=kind, attempt=attempt, wall=at.timestamp())
            for job_id, kind, attempt, at in JobEvent.objects.filter(job__queue__in=self.queues)
            .values_list("job_id", "kind", "attempt", "at")
        ]
        assets, staging, paused = self.downloads.evidence() if self.downloads else ([], [], set())
        locked_workers = sum(path.read_text(errors="replace").count("database is locked")
                             for path in self.fleet.logs())
        integrity = None
        if self.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA integrity_check")
                integrity = "; ".join(row[0] for row in cursor.fetchall())
        return checker.Evidence(
            lines=checker.read_ledger(self.ledger_dir),
            jobs=jobs,
            events=events,
            faults=list(self.faults),
            limits=dict(self.limits),
            acked=set(load.acked),
            enqueue_calls=list(load.calls),
            sampled_violations=list(sampler.violations),
            samples=sampler.samples,
            claims_seen=dict(sampler.first_seen),
            survivors=list(self.survivors),
            end_wall=time.time(),
            locked_errors_enqueue=load.locked,
            locked_errors_workers=locked_workers,
            integrity=integrity,
            exits=list(self.fleet.ended),
            assets=assets,
            staging=staging,
            paused_assets=paused,
            allowed_failures=dict(scenario.allowed_failures),
        )

    def cleanup(self):
        """End whatever this run started, whatever happened (safe to call twice)."""
        self.stop_faults.set()
        try:
            durable_commits(False)
        except Error:
            reset_connection()
        for timer in self.timers:
            timer.cancel()
        for proc in self.burners:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        self.burners.clear()
        self.fleet.stop()
        for pid, _marker in procs.of_run(RUN_ENV, self.id):
            procs.kill_if_of_run(pid, RUN_ENV, self.id)
        if self.redis is not None:
            self.redis.close()
        if self.downloads is not None:
            self.downloads.close()
        for undo in reversed(self.undo):
            undo()
        self.undo.clear()
