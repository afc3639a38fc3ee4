"""Fault scenarios: each one fault, injected again and again during a run's fault window.

A scenario is pluggable: subclass `Scenario`, give it a name, and register it
in SCENARIOS. The harness calls, in order:

    adjust(load) -> Load   the load this scenario wants (e.g. more process-mode jobs)
    setup(run)             before the workers start (raise ScenarioSkipped when the
                           machine cannot host the fault)
    inject(run)            once per fault; may block for the fault's length
                           (the harness pauses `pause_s` between calls)
    heal(run)              after the window, always, even when something failed

Faults themselves are in tests/chaos/faults.py; kinds are declared in
tests/chaos/kinds.py (workers load it through JOBS_HANDLER_MODULES).

A scenario whose load has CV jobs sets `uses_redis` (the run starts a Redis
of its own and CV workers); one with downloads sets `download_load` (the run
starts a loopback origin and submits real downloads), and `allowed_failures`
names the error codes with which its faults may legitimately end a download.
"""

from dataclasses import replace

from tests.chaos import faults
from tests.chaos.downloads import DownloadLoad


class ScenarioSkipped(Exception):
    """This machine cannot host the scenario's fault; the message says why."""


class Scenario:
    name = ""
    description = ""
    postgres_only = False
    needs_proxy = False
    warmup_s = 1.5  # the first jobs run before the first fault
    pause_s = (1.5, 2.5)  # between two faults, seeded
    uses_redis = False
    download_load = None  # DownloadLoad: real downloads.fetch jobs besides the ledger jobs
    allowed_failures = {}  # download error code -> why a fault may end a download with it

    def adjust(self, load):
        return load

    def setup(self, run):
        pass

    def inject(self, run):
        raise NotImplementedError

    def heal(self, run):
        pass

    def __repr__(self):
        return f"<Scenario {self.name}>"


class WorkerKill(Scenario):
    name = "worker_kill"
    description = "SIGKILL a random worker every couple of seconds; the process manager restarts it"

    def inject(self, run):
        faults.kill_worker(run)


class ChildKill(Scenario):
    name = "child_kill"
    description = "SIGKILL a random process-mode child every couple of seconds"

    def adjust(self, load):
        # Children cost a Python start each: fewer, longer jobs, most in a child.
        return replace(load, jobs=max(30, load.jobs // 10), process_share=0.6, process_s=(1.0, 3.0))

    def inject(self, run):
        faults.kill_child(run)


class WorkerStop(Scenario):
    name = "worker_stop"
    description = "SIGSTOP a random worker past its lease, then SIGCONT it"
    pause_s = (0.5, 1.5)

    def inject(self, run):
        faults.freeze_worker(run, run.config.timings.lease_s + 2)


class WorkerStopInTransaction(Scenario):
    name = "stop_in_transaction"
    description = ("SIGSTOP a worker at the worst moment: inside a transaction, holding row "
                   "locks, for three times its lease")
    postgres_only = True
    pause_s = (1.0, 2.0)

    def adjust(self, load):
        # Every job carries one of two keys: any claim or completion locks one of
        # their rows. Two keys run 3 jobs at once, so fewer jobs.
        return replace(load, jobs=max(60, load.jobs // 10), keyed_share=1.0, users=2)

    def inject(self, run):
        faults.freeze_worker_in_transaction(run, 3 * run.config.timings.lease_s)


class PostgresRestart(Scenario):
    name = "pg_restart"
    description = "stop PostgreSQL with -m immediate, start it again after the outage"
    postgres_only = True
    pause_s = (4.0, 6.0)

    def __init__(self, outage_s=10.0):
        self.outage_s = outage_s

    def inject(self, run):
        faults.restart_postgres(run, self.outage_s)


class TerminateSessions(Scenario):
    name = "terminate_sessions"
    description = "pg_terminate_backend() every worker session"
    postgres_only = True

    def inject(self, run):
        faults.terminate_sessions(run)


class LostReplies(Scenario):
    name = "lost_replies"
    description = "one worker's requests reach PostgreSQL but no reply comes back, past its lease"
    postgres_only = True
    needs_proxy = True
    pause_s = (0.5, 1.5)

    def inject(self, run):
        faults.proxy_fault(run, "drop_replies", run.config.timings.lease_s + 1, reset=True)


class Partition(Scenario):
    name = "partition"
    description = ("one worker cut off from PostgreSQL past its lease; healed by a reset "
                   "or by delivering what was held")
    postgres_only = True
    needs_proxy = True
    pause_s = (0.5, 1.5)

    def inject(self, run):
        faults.proxy_fault(run, "partition", run.config.timings.lease_s + 2,
                           reset=run.rng.random() < 0.5)


class CpuContention(Scenario):
    name = "cpu_contention"
    description = "busy processes compete with the workers for the CPU"
    pause_s = (60.0, 60.0)

    def setup(self, run):
        faults.start_burners(run, run.config.burners)

    def inject(self, run):
        pass  # the contention lasts the whole window

    def heal(self, run):
        faults.stop_burners(run)


def cv_load(load):
    """A fifth of the jobs, half of them redis mode (the CV fleet runs 8 at once, not 24),
    some of those longer than an outage, so a fault finds CV jobs running and queued."""
    return replace(load, jobs=max(60, load.jobs // 5), cv_share=0.5, cv_s=(0.2, 3.0))


class RedisRestart(Scenario):
    name = "redis_restart"
    description = ("kill Redis (no persistence, so every key is lost) and start it empty "
                   "a second later; CV jobs must be sent again, and run once at a time")
    uses_redis = True
    pause_s = (3.0, 5.0)

    def __init__(self, outage_s=1.0):
        self.outage_s = outage_s

    def adjust(self, load):
        return cv_load(load)

    def inject(self, run):
        faults.restart_redis(run, self.outage_s)


class RedisStall(Scenario):
    name = "redis_stall"
    description = "CLIENT PAUSE ALL past every client's socket timeout (5 s): Redis answers nothing"
    uses_redis = True
    pause_s = (2.0, 4.0)

    def __init__(self, seconds=7.0):
        self.seconds = seconds

    def adjust(self, load):
        return cv_load(load)

    def inject(self, run):
        faults.stall_redis(run, self.seconds)


# Kills may spend all three attempts of a download: it then fails, and says why.
KILLED_ATTEMPTS = {
    "lease_expired": "its worker was killed during its last attempt",
    "crashed": "its child was killed during its last attempt",
}


class DownloadScenario(Scenario):
    """Real downloads only (no ledger jobs, so their user:N keys meet no others).

    `downloads` submissions, or one for every 50 jobs the run was asked for
    (a fetch costs a Python start and seconds of transfer, a ledger job none).
    """

    per_jobs = 50

    def __init__(self, downloads=None):
        self.downloads = downloads
        self.download_load = DownloadLoad(downloads=downloads or 16)

    def adjust(self, load):
        count = self.downloads or max(16, load.jobs // self.per_jobs)
        # About three downloads per file: some share an asset, most need a fetch.
        self.download_load = replace(self.download_load, downloads=count, files=max(6, count // 3))
        return replace(load, jobs=0)


class DownloadKill(DownloadScenario):
    name = "download_kill"
    description = ("real downloads (yt-dlp children) from a loopback origin; SIGKILL a random "
                   "worker or a random child in turn")
    allowed_failures = KILLED_ATTEMPTS
    pause_s = (1.0, 2.0)  # after the wait for a transfer below

    def inject(self, run):
        # Mid-transfer is the point. Without waiting for one, a short run whose
        # downloads come quickly can land its kills between transfers, where
        # there is no child to kill and nothing to lose.
        faults.wait_for_a_transfer(run, timeout_s=5.0)
        if run.rng.random() < 0.5:
            faults.kill_worker(run)
        elif faults.kill_child(run) is None:
            faults.kill_worker(run)  # the transfer ended meanwhile: its worker's turn


class DiskFull(DownloadScenario):
    name = "disk_full"
    description = ("real downloads into a MEDIA_ROOT on a small tmpfs, filled up to the last "
                   "64 KiB for a few seconds at a time")
    allowed_failures = {"storage_full": "the disk was full during all its attempts"}
    pause_s = (2.0, 4.0)
    tmpfs_bytes = 64 * 1024 * 1024  # room for every file, so only the filler fills it

    def __init__(self, downloads=None, full_s=4.0):
        super().__init__(downloads)
        self.full_s = full_s

    def setup(self, run):
        from tests.chaos import downloads

        try:
            downloads.mount_tmpfs(run.media_root, self.tmpfs_bytes)
        except downloads.MountRefused as exc:
            raise ScenarioSkipped(f"disk_full needs a tmpfs for MEDIA_ROOT: {exc}") from None
        run.undo.append(lambda: downloads.unmount(run.media_root))

    def inject(self, run):
        # The worst moment: a transfer is writing its partial file. Without
        # waiting for one, a short run can fill the disk between transfers.
        faults.wait_for_a_transfer(run, timeout_s=10.0)
        faults.fill_disk(run, self.full_s)


SCENARIOS = {s.name: s for s in [WorkerKill(), ChildKill(), WorkerStop(),
                                  WorkerStopInTransaction(), PostgresRestart(),
                                  TerminateSessions(), LostReplies(), Partition(),
                                  CpuContention(), RedisRestart(), RedisStall(),
                                  DownloadKill(), DiskFull()]}


def get(name):
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"No chaos scenario named {name!r}; choose from {', '.join(SCENARIOS)}.") from None


def for_database(vendor):
    """The scenarios that make sense on `vendor` ("postgresql" or "sqlite"), in order."""
    return [s for s in SCENARIOS.values() if vendor == "postgresql" or not s.postgres_only]
