"""The worker: one supervisor process per machine, read top to bottom as the life of its jobs.

    register → (claim → run → record)* → hand back what is left → unregister

Threads: the main loop claims; executor threads run handlers (or supervise
child processes); the completer records successes in batches; the heartbeat
thread beats, renews leases, routes cancel/pause requests, enforces timeouts,
runs the reaper and samples its queues for the dashboard; on PostgreSQL a listener thread turns NOTIFY into
wake-ups. How each attempt ends is recorded through jobs/engine/outcome.py.
"""

import logging
import os
import queue as queue_module
import socket
import threading
import time

from django.db import DatabaseError, close_old_connections, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models.functions import Now

from jobs import conf, services
from jobs.cv import clients
from jobs.engine import claiming, limits, outcome, queries, registry, wakeup
from jobs.maintenance import reaper, sampling
from jobs.models import Job, JobStatus, Outcome
from jobs.models import Worker as WorkerRow
from jobs.runtime import execution, fence, stopsignals
from jobs.runtime.context import JobContext

log = logging.getLogger("jobs.worker")

# Pauses before trying a failed completion batch again; the jobs' leases are
# still renewed meanwhile, so these add up to far less than a lease.
COMPLETION_RETRY_PAUSES_S = (0.1, 0.5, 2.0)
# How long a process-mode child whose job is no longer ours may take to exit
# on its own before it is stopped (a stale one stays at most this much longer).
LOST_CHILD_GRACE_S = 1.0


class Running:
    """A job this worker holds: its row as claimed, its context, its thread."""

    # thread: its executor; lost_at: when a renewal first missed a child's job;
    # slot_freed: its slot was given back while its thread runs on (a timeout);
    # renewed_at: when (monotonic) the claim or the last renewal that held its lease was
    # sent; fenced_at: when the fence stopped it (jobs/runtime/fence.py)
    __slots__ = ("job", "ctx", "thread", "timeout_s", "slot_freed", "child", "lost_at",
                 "renewed_at", "fenced_at")

    def __init__(self, job, ctx, timeout_s, renewed_at):
        self.job = job
        self.ctx = ctx
        self.thread = None
        self.timeout_s = timeout_s
        self.slot_freed = False
        self.child = None  # the supervised process of a process-mode job
        self.lost_at = None
        self.renewed_at = renewed_at
        self.fenced_at = None


class Worker:
    def __init__(self, *, queues=None, concurrency=20, burst=False, max_jobs=None,
                 name=None, kinds=None, companions=(), slots=None):
        # `slots` ({queue: n}): each queue its own slots, so heavy jobs of one
        # cannot take every slot from another's; without, queues share `concurrency`.
        self.slots = dict(slots) if slots else None
        self.queues = list(self.slots) if self.slots else list(queues) if queues else registry.queues()
        self.concurrency = sum(self.slots.values()) if self.slots else concurrency
        self.burst = burst
        self.max_jobs = max_jobs
        self.kinds = list(kinds) if kinds else registry.names()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.row = None
        self.running = {}  # job id -> Running
        self.lock = threading.Lock()
        self.completions = queue_module.SimpleQueue()
        self.wake = threading.Event()  # something to claim, or a slot freed
        self.stop_check = threading.Event()  # a cancel or pause was requested
        self.stopping = threading.Event()  # first signal: stop claiming
        self.hurry = threading.Event()  # second signal: hand everything back now
        self.exited = threading.Event()
        self.claimed_total = 0
        # When (time.monotonic()) the earliest known rate window opens: this
        # worker then unparks the jobs waiting for it (jobs/engine/limits.py).
        self.rates_due = float("inf")
        # When a queue this worker found resting (its gap) may start a job again: it claims
        # then, not at its next poll.
        self.rest_due = float("inf")
        self.quiet = False
        self.monitor = None  # watches redis-mode jobs, started with the first one
        self.tasks = queue_module.SimpleQueue()  # (entry, target) for executor threads
        self.executors = []
        self.idle_executors = 0
        # Roles that live as long as the worker serves (the scheduler): each
        # has start() and stop(), and starts once the schema is in place.
        self.companions = list(companions)
        self.fence = fence.Fence(self)

    # --- life -------------------------------------------------------------

    def run(self):
        """Serve until told to stop (a signal, --burst, --max-jobs, or staff's "stop")."""
        if not self.wait_for_migrations():
            return 1
        if not self.start_up():
            self.unregister()
            return 1
        for companion in self.companions:
            companion.start()
        wakeup.subscribe(jobs=self.wake, stop=self.stop_check)
        if any(registry.get(k).policy.mode == "redis" for k in self.kinds) and clients.is_local_mode():
            self.cv_monitor()  # local mode: the embedded CV worker starts with the runworker
        self.fence.start()  # before the first claim: every job held is watched
        beat = threading.Thread(target=self.heartbeat_loop, name="haulage-heartbeat", daemon=True)
        beat.start()
        completer = threading.Thread(target=self.completer_loop, name="haulage-completer", daemon=True)
        completer.start()
        if connection.vendor == "postgresql":
            wakeup.Listener(on_jobs=lambda _queue: self.wake.set(),
                            on_stop=lambda _id: self.stop_check.set(),
                            stopping=self.exited).start()
        try:
            self.main_loop()
            self.shutdown()
        finally:
            self.exited.set()
            for companion in self.companions:
                companion.stop()
            wakeup.unsubscribe(jobs=self.wake, stop=self.stop_check)
            self.completions.put(None)
            completer.join(10)
            self.unregister()
            beat.join(5)
            connection.close()
        return 0

    def main_loop(self):
        idle_claims = 0
        while not self.stopping.is_set():
            claimed = self.claim_some()
            if claimed is None:  # the database is away: back off, then try again
                self.stopping.wait(conf.JOBS_POLL_SECONDS)
                continue
            idle_claims = 0 if claimed or self.running else idle_claims + 1
            if self.monitor is not None and self.monitor.inflight:
                idle_claims = 0
            if self.done_by_count() or (self.burst and idle_claims and self.nothing_left()):
                break
            if claimed and self.free_slots() > 0:
                continue  # a full batch may mean more is waiting
            due = min(self.rates_due, self.rest_due) - time.monotonic()
            self.wake.wait(max(0.0, min(conf.JOBS_POLL_SECONDS, due)))
            self.wake.clear()

    def claim_some(self):
        # This claim finds out again; a full worker skips it, and a freed slot wakes it.
        self.rest_due = float("inf")
        if time.monotonic() >= self.rates_due:
            try:
                self.open_rates()
            except Exception:  # noqa: BLE001 - a worker never dies of data: the reaper tries again
                log.exception("unparking jobs whose rate window opened failed")
                self.reset_connection()
        free = self.free_slots()
        if self.quiet or free <= 0:
            return []
        if free < self.concurrency // 2 and self.running:
            # Busy: give a few more completions a moment to be recorded, so
            # one claim serves a batch instead of a job or two.
            self.wake.wait(0.002)
            free = self.free_slots()
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.claimed_total)
            if free <= 0:
                return []
        sent = time.monotonic()  # the claimed leases end a lease after this, or later
        try:
            jobs = claiming.claim(self.row, queues=self.queues, kinds=self.kinds, limit=free,
                                  slots=self.free_by_queue())
        except DatabaseError as exc:
            log.warning("claim failed (%s); retrying", exc.__class__.__name__)
            self.reset_connection()
            return None
        except Exception:  # noqa: BLE001 - a worker never dies of data: log, back off, go on
            log.exception("claim failed; retrying after a poll interval")
            self.reset_connection()
            return None
        cv_jobs = []
        for job in jobs:
            if registry.get(job.kind).policy.mode == "redis":
                cv_jobs.append(job)
            else:
                self.start_or_fail(job, sent)
        if cv_jobs:
            # Publishing frees their slots at once; the monitor watches them from here.
            self.cv_monitor().adopt(cv_jobs)
        self.claimed_total += len(jobs)
        self.expect_rate_opening(jobs.rate_opens_in_s)
        if jobs.rest_ends_in_s is not None:
            # A hair later, so the database's clock has passed the rest's end too.
            self.rest_due = time.monotonic() + jobs.rest_ends_in_s + 0.005
        return jobs

    def free_slots(self):
        with self.lock:
            return self.concurrency - sum(1 for r in self.running.values() if not r.slot_freed)

    def free_by_queue(self):
        """{queue: free slots} for a worker whose queues have slots of their own, else None."""
        if self.slots is None:
            return None
        with self.lock:
            busy = [r.job.queue for r in self.running.values() if not r.slot_freed]
        return {queue: n - busy.count(queue) for queue, n in self.slots.items()}

    def expect_rate_opening(self, in_s):
        """A rate window opens in `in_s` seconds (None: none known): be there when it does."""
        if in_s is not None:
            # A hair later, so the database's clock has passed the opening too.
            self.rates_due = min(self.rates_due, time.monotonic() + max(0.0, in_s) + 0.005)
            self.wake.set()

    def open_rates(self):
        """Unpark the jobs whose rate window opened; note when the next one opens."""
        self.rates_due = float("inf")
        self.expect_rate_opening(limits.unpark_due_rates())

    def done_by_count(self):
        return (self.max_jobs is not None and self.claimed_total >= self.max_jobs
                and not self.running and self.completions.empty())

    def nothing_left(self):
        with self.lock:
            busy = bool(self.running)
        if self.monitor is not None:
            with self.monitor.lock:
                busy = busy or bool(self.monitor.inflight)
        if busy or not self.completions.empty():
            return False
        try:
            return not claiming.claimable_exists(queues=self.queues, kinds=self.kinds)
        except DatabaseError:
            self.reset_connection()
            return False

    # --- one job ----------------------------------------------------------

    def start_or_fail(self, job, leased_at):
        """Start a claimed job; one that cannot even start (its payload is not what its
        kind's policy reads, say) fails at once instead of taking the main loop down."""
        try:
            self.start(job, leased_at)
        except Exception as exc:  # noqa: BLE001
            log.exception("job %s could not start; failing it", job.pk)
            with self.lock:
                self.running.pop(job.pk, None)
            execution.guarded(outcome.record, job, Outcome.FAILED, code="unstartable",
                              error=f"{type(exc).__name__}: {exc}", exc=exc)

    def start(self, job, leased_at):
        policy = registry.get(job.kind).policy
        ctx = JobContext(job, worker_id=self.name)
        # A process-mode child is killed at its wall-clock cap by its
        # supervisor; the inline timeout watchdog is for threads only.
        timeout = None if policy.mode == "process" else policy.timeout_for(job.payload)
        entry = Running(job, ctx, timeout, leased_at)
        with self.lock:
            self.running[job.pk] = entry
        target = self.run_inline
        if policy.mode == "process":
            from jobs.runtime.process import mode as process_mode

            target = process_mode.runner(self)
        self.dispatch(entry, target)

    def dispatch(self, entry, target):
        """Hand a job to an idle executor thread, or start one.

        Executor threads live as long as the worker, so each keeps its
        database connection across jobs; there are `concurrency` of them, plus
        one for each timed-out handler that never returned.
        """
        with self.lock:
            spawn = self.idle_executors == 0
            if not spawn:
                self.idle_executors -= 1
        self.tasks.put((entry, target))
        if spawn:
            thread = threading.Thread(target=self.executor_loop, name="haulage-executor", daemon=True)
            self.executors.append(thread)
            thread.start()

    def executor_loop(self):
        try:
            while (item := self.tasks.get()) is not None:
                entry, target = item
                entry.thread = threading.current_thread()
                try:
                    target(entry)
                except BaseException:  # noqa: BLE001 - one bad job never kills an executor
                    # Released, so its lease is no longer renewed: the reaper
                    # takes the job back once the lease runs out.
                    log.exception("job %s crashed its executor", entry.job.pk)
                    self.free(entry)
                finally:
                    # Keep a healthy connection for the next job; drop a broken one.
                    connection.close_if_unusable_or_obsolete()
                with self.lock:
                    self.idle_executors += 1
        finally:
            connection.close()

    def cv_monitor(self):
        if self.monitor is None:
            from jobs.cv.monitor import Monitor

            self.monitor = Monitor(self)
            self.monitor.start()
        return self.monitor

    def run_inline(self, entry):
        job, ctx = entry.job, entry.ctx
        result, value = execution.run_handler(job, ctx)
        if result == "ok" and ctx.stop_reason is None:
            self.completions.put((entry, value))  # recorded in a batch by the completer
            self.wake.set()
            return
        execution.guarded(execution.settle, job, ctx, result, value)
        self.free(entry)

    def completer_loop(self):
        """Record successes in batches, beside the main loop's claims.

        Its own thread and connection, so claiming the next jobs and recording
        the last ones overlap instead of taking turns.
        """
        try:
            while (item := self.completions.get()) is not None:
                self.flush_completions(first=item)
        finally:
            connection.close()

    def flush_completions(self, first=None):
        batch = [] if first is None else [first]
        while not self.completions.empty():
            item = self.completions.get()
            if item is None:  # the stop sentinel: let the completer see it
                self.completions.put(None)
                break
            batch.append(item)
        if not batch:
            return
        # Each was still RUNNING under our lease when its handler returned; the
        # guarded UPDATE drops any whose lease was lost since. That guard also
        # makes a second try safe when the first one's connection broke (a
        # terminated session, a failover), even if it committed and only the
        # reply was lost: finished work is not run again for want of a retry.
        pairs = [(e.job, value) for e, value in batch]
        result = execution.guarded(outcome.record_successes, pairs)
        for pause_s in COMPLETION_RETRY_PAUSES_S:
            if result is not None or self.hurry.is_set():
                break
            time.sleep(pause_s)
            result = execution.guarded(outcome.record_successes, pairs)
        if result is None:
            log.warning("%d completions not recorded; their leases will expire and they run again",
                        len(batch))
        for entry, _value in batch:
            self.free(entry)

    def free(self, entry):
        """The job's slot is free again: its attempt was recorded, or given up to the reaper."""
        with self.lock:
            if self.running.get(entry.job.pk) is entry:
                del self.running[entry.job.pk]
        self.wake.set()

    # --- heartbeat, leases, stop requests, timeouts, reaper ------------------

    def heartbeat_loop(self):
        next_beat = next_rescue = next_sample = 0.0
        # Not at start: a fleet restarted by a deploy would all read the backlog at once.
        next_unserved = time.monotonic() + reaper.unserved_every_s()
        while not self.exited.is_set():
            try:
                now = time.monotonic()
                self.route_stop_requests()
                self.enforce_timeouts()
                self.stop_lost_children()
                if now >= next_beat:
                    self.beat()
                    next_beat = now + conf.JOBS_HEARTBEAT_SECONDS
                if now >= next_rescue:
                    unserved = now >= next_unserved
                    self.reap(unserved=unserved)
                    next_rescue = now + conf.JOBS_RESCUE_INTERVAL_SECONDS
                    if unserved:
                        next_unserved = now + reaper.unserved_every_s()
                if now >= next_sample:
                    next_sample = now + conf.JOBS_HEARTBEAT_SECONDS
                    sampling.take(self.queues)  # once a minute per queue across the fleet
            except DatabaseError as exc:
                log.warning("heartbeat failed (%s); retrying", exc.__class__.__name__)
                self.reset_connection()
            except Exception:  # noqa: BLE001 - this thread must outlive any single failure
                log.exception("heartbeat loop error")
            # Stop requests wake this thread at once (NOTIFY on PostgreSQL);
            # otherwise check about every half second.
            self.stop_check.wait(0.5)
            self.stop_check.clear()
        connection.close()

    def beat(self):
        updated = WorkerRow.objects.filter(pk=self.row.pk).update(heartbeat_at=Now())
        command = WorkerRow.objects.filter(pk=self.row.pk).values_list("command", flat=True).first()
        if not updated:
            self.register()  # our row was pruned while we were away: come back
        if command == WorkerRow.Command.QUIET:
            self.quiet = True
        elif command == WorkerRow.Command.STOP:
            self.stopping.set()
            self.wake.set()
        with self.lock:
            # A fenced attempt is being stopped: its lease is let lapse (jobs/runtime/fence.py).
            held = [r for r in self.running.values() if not r.slot_freed and r.fenced_at is None]
        jobs = [r.job for r in held]
        sent = time.monotonic()
        kept = services.renew_leases(self.row, jobs)
        self.fence.renewed(sent)
        for entry in held:
            if entry.job.pk in kept:
                entry.renewed_at = max(entry.renewed_at, sent)
                continue
            if entry.child is None:
                entry.ctx.request_stop(Outcome.LEASE_LOST)
            elif entry.lost_at is None:
                # A child records its own outcome and then exits, which takes
                # its interpreter a moment: give it that before calling the
                # lease lost and stopping it (see stop_lost_children).
                entry.lost_at = time.monotonic()

    def stop_lost_children(self):
        with self.lock:
            late = [r for r in self.running.values() if r.lost_at is not None
                    and time.monotonic() - r.lost_at >= LOST_CHILD_GRACE_S]
        for entry in late:
            entry.ctx.request_stop(Outcome.LEASE_LOST)

    def route_stop_requests(self):
        with self.lock:
            ids = [pk for pk, r in self.running.items() if not r.slot_freed]
        if not ids:
            return
        asked = Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING).exclude(stop_requested="")
        for pk, what in asked.values_list("pk", "stop_requested"):
            entry = self.running.get(pk)
            if entry is not None and what in outcome.STOPS:
                entry.ctx.request_stop(what)

    def enforce_timeouts(self):
        now = time.monotonic()
        with self.lock:
            late = [r for r in self.running.values() if not r.slot_freed and r.timeout_s
                    and now - r.ctx.started_monotonic > r.timeout_s]
        for entry in late:
            # A thread cannot be killed: record the timeout now, stop renewing
            # its lease, and give its slot back; the thread ends when its handler does.
            entry.ctx.request_stop(Outcome.TIMEOUT)
            outcome.record(entry.job, Outcome.TIMEOUT, error=execution.STOP_MESSAGES[Outcome.TIMEOUT])
            entry.slot_freed = True
            self.wake.set()

    def reap(self, *, unserved=True):
        """Recover what dead workers left behind (jobs/maintenance/reaper.py); any survivor does it."""
        if reaper.reap(unserved=unserved):
            self.wake.set()
        # Openings another worker noted (it may have died since): this one looks then too.
        self.expect_rate_opening(queries.rate_opening_in())

    # --- shutdown -----------------------------------------------------------

    def request_stop(self, signum=None, frame=None):
        if self.stopping.is_set():
            log.warning("second signal: handing running jobs back now")
            self.hurry.set()
        else:
            log.info("stopping: no new claims; waiting up to %ss for running jobs",
                     conf.JOBS_SHUTDOWN_GRACE_SECONDS)
        self.stopping.set()
        self.wake.set()

    def shutdown(self):
        deadline = time.monotonic() + conf.JOBS_SHUTDOWN_GRACE_SECONDS
        while time.monotonic() < deadline and not self.hurry.is_set():
            self.flush_completions()
            with self.lock:
                if not any(not r.slot_freed for r in self.running.values()):
                    break
            self.hurry.wait(0.1)
        self.flush_completions()
        with self.lock:
            left = [r for r in self.running.values() if not r.slot_freed]
        for entry in left:
            entry.ctx.request_stop(Outcome.REQUEUED)
        # Give cooperative handlers (and child supervisors) a moment to unwind
        # and requeue their own jobs; then requeue whatever is still ours.
        settle_s = 1.0 if self.hurry.is_set() else max(5.0, conf.JOBS_KILL_GRACE_SECONDS + 2)
        until = time.monotonic() + settle_s
        while time.monotonic() < until:
            with self.lock:
                if not any(self.running.get(e.job.pk) is e for e in left):
                    break
            time.sleep(0.05)
        self.flush_completions()
        for entry in left:
            execution.guarded(outcome.record, entry.job, Outcome.REQUEUED,
                              error=execution.STOP_MESSAGES[Outcome.REQUEUED])
        if self.monitor is not None:
            self.monitor.hand_back_all()
        for _thread in self.executors:
            self.tasks.put(None)  # each idle executor closes its connection and ends
        for thread in self.executors:
            thread.join(0.5)

    # --- registration and the database ------------------------------------------

    def register(self):
        self.row = WorkerRow.objects.create(
            name=self.name, host=socket.gethostname(), pid=os.getpid(), queues=self.queues,
            kinds=self.kinds, concurrency=self.concurrency,
        )
        queues = ",".join(f"{q}={n}" for q, n in self.slots.items()) if self.slots \
            else ",".join(self.queues)
        log.info("worker %s serving queues %s (%d kinds, concurrency %d)",
                 self.name, queues, len(self.kinds), self.concurrency)

    def unregister(self):
        try:
            WorkerRow.objects.filter(pk=self.row.pk).update(stopped_at=Now())
        except (DatabaseError, AttributeError):
            pass

    def start_up(self):
        """Register and seed the queues, riding out a database that drops us meanwhile."""
        while not self.stopping.is_set():
            try:
                if self.row is None:
                    self.register()
                limits.ensure_queues()
                return True
            except DatabaseError as exc:
                log.warning("start-up interrupted (%s); trying again", exc.__class__.__name__)
                self.reset_connection()
                self.stopping.wait(1.0)
        return False

    def wait_for_migrations(self):
        """Wait for the schema instead of crash-looping while a deploy migrates."""
        deadline = time.monotonic() + conf.JOBS_MIGRATION_WAIT_SECONDS
        said = False
        while not self.stopping.is_set():
            try:
                executor = MigrationExecutor(connection)
                if not executor.migration_plan(executor.loader.graph.leaf_nodes()):
                    return True
                problem = "migrations are not applied yet"
            except DatabaseError as exc:
                problem = f"the database is unreachable ({exc.__class__.__name__})"
                self.reset_connection()
            if time.monotonic() > deadline:
                log.error("giving up: %s after %ss", problem, conf.JOBS_MIGRATION_WAIT_SECONDS)
                return False
            if not said:
                log.warning("waiting: %s", problem)
                said = True
            self.stopping.wait(2.0)
        return False

    @staticmethod
    def reset_connection():
        """Drop a broken connection so the next query reconnects (e.g. after a PostgreSQL restart)."""
        try:
            connection.close()
        except Exception:  # noqa: BLE001
            pass
        close_old_connections()


def install_signal_handlers(worker):
    # Not request_stop itself as the handler: it sets events the main loop waits on.
    stopsignals.on_stop_signals(worker.request_stop)
