"""Fault scenarios: each one fault, injected again and again during a run's fault window.

A scenario is pluggable: subclass `Scenario`, give it a name, and register it
in SCENARIOS. The harness calls, in order:

    adjust(load) -> Load   the load this scenario wants (e.g. more process-mode jobs)
    setup(run)             before the workers start
    inject(run)            once per fault; may block for the fault's length
                           (the harness pauses `pause_s` between calls)
    heal(run)              after the window, always, even when something failed

Faults themselves are in tests/chaos/faults.py; kinds are declared in
tests/chaos/kinds.py (workers load it through JOBS_HANDLER_MODULES).
"""

from dataclasses import replace

from tests.chaos import faults


class Scenario:
    name = ""
    description = ""
    postgres_only = False
    needs_proxy = False
    warmup_s = 1.5  # the first jobs run before the first fault
    pause_s = (1.5, 2.5)  # between two faults, seeded

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


SCENARIOS = {s.name: s for s in [WorkerKill(), ChildKill(), WorkerStop(),
                                  WorkerStopInTransaction(), PostgresRestart(),
                                  TerminateSessions(), LostReplies(), Partition(),
                                  CpuContention()]}


def get(name):
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"No chaos scenario named {name!r}; choose from {', '.join(SCENARIOS)}.") from None


def for_database(vendor):
    """The scenarios that make sense on `vendor` ("postgresql" or "sqlite"), in order."""
    return [s for s in SCENARIOS.values() if vendor == "postgresql" or not s.postgres_only]
