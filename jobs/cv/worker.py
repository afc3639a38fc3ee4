"""The CV worker: takes CV jobs from Redis, runs their handlers, reports back.

It needs no database. Apps declare handlers in a `cvhandlers` module (or a
module named in JOBS_HANDLER_MODULES), with the engine's handler contract:

    from jobs.cv.worker import cv_handler

    @cv_handler("segment", warmup=load_models)
    def segment(ctx, payload):
        ...
        ctx.progress(0.5, phase="detect")
        if ctx.should_stop():
            return {}
        return {"shots": [...]}

The life of one job: take (BLMOVE into this worker's processing list) ->
validate (poison goes to the dead letters) -> admit (duplicates dropped) ->
status running -> handler -> result file written atomically -> status done
and the message dropped from the processing list in one MULTI. A handler
exception makes the status failed; the engine decides about retries.

A worker cut off from Redis fences itself, by its own clock. Redis gives a
silent worker's jobs to others once its heartbeat key lapses, and that key
cannot lapse before `sent + CV_HEARTBEAT_TTL_S`, `sent` being when (on the
worker's monotonic clock) the last heartbeat write that succeeded was sent.
A thread that does no I/O watches that moment:

    sent + TTL - margin      every running job is asked to stop (`should_stop()`
                             says yes) and reports nothing more; no job starts
                             until a heartbeat is written again
    sent + TTL - margin / 4  a handler still running: the worker process ends
                             itself (exit code 75) after one CRITICAL line; its
                             process manager starts it again
    sent + TTL               the earliest the heartbeat, and the jobs, can go

A stopped job goes back to its queue: handed back by the worker once Redis
answers, or returned by a reaper once the heartbeat lapsed, whichever comes
first (a hand-back finds nothing to move after a reaper). Every Redis call
fails within half the margin (`redis_timeout_s`), never hangs.

`manage.py runcvworker` runs `CVWorker.run()` in the foreground; in local
mode the engine calls `start_embedded_worker()` to run it in a thread.
"""

import logging
import os
import random
import secrets
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext
from redis.exceptions import RedisError

from jobs import conf
from jobs.cv import clients, files
from jobs.cv.transport import (
    Admission,
    CVConfig,
    PoisonMessage,
    State,
    Transport,
    check_name,
    new_status,
    parse_message,
    result_path,
)

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.5  # status writes from progress() at most ~2 per second
CANCEL_CHECK_INTERVAL_S = 0.5  # should_stop() reads the cancel key at most this often
BACKOFF_MAX_S = 2.0
# One take() waits this long at most before the loop looks at the stop flag
# again: a stop never waits for a long blocking read to run out, at the cost
# of a few idle BLMOVEs a second per thread.
TAKE_WAIT_S = 0.5
# The fence (see the module docstring). A job is stopped at least this long
# before its worker's heartbeat can lapse: time for a handler to notice and
# return, and for the process to end itself if it does not.
FENCE_MARGIN_MIN_S = 1.0
FENCE_TICK_S = 0.05  # how often the fence looks at the clock
FENCE_EXIT_CODE = 75  # EX_TEMPFAIL, as the engine's worker: ended itself to fence a handler
FENCED = "fenced"  # a CVJobContext.outcome: stopped because the heartbeat may lapse


def fence_margin_s(config):
    """How long before its heartbeat can lapse a cut-off worker stops its jobs.

    A fifth of the TTL, and at least FENCE_MARGIN_MIN_S; but at most half of
    what the TTL leaves after one heartbeat interval. The deadline then stays
    well after the next beat is due (an interval after the last one, plus its
    round trip), so a healthy worker never fences its jobs between two beats.
    """
    ttl_s, interval_s = config.heartbeat_ttl_s, config.heartbeat_interval_s
    return min(max(FENCE_MARGIN_MIN_S, ttl_s / 5), (ttl_s - interval_s) / 2)


def redis_timeout_s(config):
    """The longest one Redis call of a CV worker may take (connect, send, reply).

    Half the fence margin, so far shorter than the TTL: a handler's progress
    write or cancel check on its way when its job is fenced fails before the
    worker would have to end itself, three quarters of the margin later.
    """
    return fence_margin_s(config) / 2


# --- Handlers -----------------------------------------------------------------


@dataclass(frozen=True)
class CVHandler:
    type: str
    func: object  # (ctx: CVJobContext, payload: dict) -> dict
    warmup: object = None  # () -> None, run once before the worker announces itself


_handlers = {}


def cv_handler(job_type, *, warmup=None):
    """Register the decorated function as the handler of `job_type`."""

    def register(func):
        existing = _handlers.get(job_type)
        name = f"{func.__module__}.{func.__qualname__}"
        if existing and f"{existing.func.__module__}.{existing.func.__qualname__}" != name:
            raise ImproperlyConfigured(f"Two CV handlers for {job_type!r}: {existing.func.__qualname__} and {name}.")
        _handlers[job_type] = CVHandler(job_type, func, warmup)
        return func

    return register


def discover_handlers():
    """Import every installed app's `cvhandlers` module, and those named in JOBS_HANDLER_MODULES."""
    autodiscover_modules("cvhandlers")
    for name in conf.handler_modules():
        import_module(name)
    return dict(_handlers)


def registered_types():
    return sorted(_handlers)


# --- One running job ------------------------------------------------------------


class CVJobContext:
    """What a CV handler gets besides its payload: progress, stop requests, a folder.

    The engine's JobContext (jobs/runtime/context.py) without a database: `progress()`
    and `should_stop()` mean the same, written to and read from Redis.
    """

    def __init__(self, worker, message, taker=None):
        self._worker = worker
        self.message = message
        self.taker = taker  # the value of the seen key this delivery won
        self.job_id = message.job_id
        self.attempt = message.attempt
        self.work_dir = Path(settings.MEDIA_ROOT) / "cv" / message.job_id
        self.status = new_status(message.job_id, message.attempt, State.RUNNING, worker=worker.worker_id)
        # Guards `status`, `dirty` and `outcome` between the handler's thread,
        # the heartbeat thread (which flushes reports) and shutdown.
        self.lock = threading.Lock()
        # Held around every status write of this job: a progress write still
        # in flight must never land after the final one and undo it.
        self.write_lock = threading.Lock()
        self.dirty = False
        self._written_at = 0.0
        self.outcome = None  # "finished", "handed_back" or FENCED: whoever sets it first decides
        self.stop_seen = False  # the handler asked should_stop() and was told yes
        self.cancelled = False
        self._cancel_checked_at = 0.0
        self.fenced = False  # the worker's heartbeat may lapse: stop now
        self.exit_at = None  # monotonic: a fenced handler still running then ends the process
        # Set once the handler has returned and its result file (if any) is
        # written: from then on this attempt touches no file, which is what
        # the fence waits for.
        self.ended = threading.Event()

    @property
    def payload(self):
        return self.message.payload

    def progress(self, fraction=None, *, phase=None, message=None):
        """Record progress (fraction 0..1; whatever is None stays as it was).

        Written to Redis at most about twice a second; a report skipped by
        that throttle, or while Redis fails, goes out with the next heartbeat.
        Never raises.
        """
        with self.lock:
            previous_phase = self.status["phase"]
            if fraction is not None:
                self.status["fraction"] = min(1.0, max(0.0, float(fraction)))
            # str(): phases may be enums and messages lazy translations.
            if phase is not None:
                self.status["phase"] = str(phase)
            if message is not None:
                self.status["message"] = str(message)
            self.status["updated_at"] = time.time()
            due = (time.monotonic() - self._written_at >= PROGRESS_INTERVAL_S
                   or self.status["phase"] != previous_phase)
            self.dirty = True
        if due and not self._worker.redis_down:
            self.flush()

    def flush(self):
        """Write the status if it changed since the last write; errors are logged, never raised."""
        with self.write_lock:
            with self.lock:
                if not self.dirty or self.outcome is not None:
                    return
                status = dict(self.status)
                self.dirty = False
                self._written_at = time.monotonic()
            try:
                # Refused (False) once the attempt is another delivery's: nothing to retry.
                self._worker.transport.write_status(status, self.taker)
            except RedisError as exc:
                with self.lock:
                    self.dirty = True
                self._worker.redis_failed(exc)

    def should_stop(self):
        """True once the engine asked to cancel this job, the worker is shutting
        down, or it was cut off from Redis long enough to be fenced.

        A handler that was told yes has stopped: whatever it returns then is
        not taken as a result (the job is cancelled or handed back). Asks Redis
        at most every CANCEL_CHECK_INTERVAL_S, and not while Redis fails.
        """
        if self.fenced or self._worker.stopping:
            self.stop_seen = True
            return True
        now = time.monotonic()
        if (not self.cancelled and not self._worker.redis_down
                and now - self._cancel_checked_at >= CANCEL_CHECK_INTERVAL_S):
            self._cancel_checked_at = now
            try:
                self.cancelled = self._worker.transport.cancel_requested(self.job_id)
            except RedisError as exc:
                self._worker.redis_failed(exc)  # cannot tell now; ask again once Redis answers
        if self.cancelled:
            self.stop_seen = True
        return self.cancelled

    def fence(self, exit_at):
        """Stop this attempt for good: it reports nothing more, and its handler
        must have returned by `exit_at` (monotonic)."""
        with self.lock:
            if self.outcome is None:
                self.outcome = FENCED
            if self.exit_at is None:
                self.exit_at = exit_at
        self.fenced = True


# --- The worker -------------------------------------------------------------------


def default_worker_id():
    host = "".join(c if c.isalnum() or c in "_.-" else "-" for c in socket.gethostname())[:60] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


_HAND_BACK = object()  # what CVWorker._attempt returns for a job to go back to its queue


class _Backoff:
    """Exponential pause with jitter after a Redis error, reset by a success."""

    def __init__(self):
        self.failures = 0

    def next_s(self):
        self.failures += 1
        return min(BACKOFF_MAX_S, 0.1 * 2 ** self.failures) * random.uniform(0.5, 1.0)


class CVWorker:
    """Serves CV jobs of `types` with `concurrency` threads until asked to stop."""

    def __init__(self, *, types=None, concurrency=1, worker_id=None, url=None, config=None,
                 own_process=True):
        self.config = config or CVConfig.from_settings()
        self.types = list(types or registered_types())
        unknown = [t for t in self.types if t not in _handlers]
        if unknown:
            raise ImproperlyConfigured(f"No CV handler is registered for {', '.join(unknown)}.")
        if not self.types:
            raise ImproperlyConfigured("No CV handlers are registered: no app has a cvhandlers module.")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1.")
        self.concurrency = concurrency
        self.worker_id = check_name("worker id", worker_id or default_worker_id())
        # Bytes, not text: a message that is not UTF-8 must still be readable
        # enough to dead-letter and remove by its exact value.
        self.client = clients.build_client(url, decode_responses=False,
                                           timeout_s=redis_timeout_s(self.config))
        self.transport = Transport(self.client, config=self.config)
        # Whether the fence may end the process: not when it is shared (the
        # embedded worker runs in the engine's worker, which has jobs of its own).
        self.own_process = own_process
        self.margin_s = fence_margin_s(self.config)
        self.ready = threading.Event()  # set once the heartbeat is first written
        self.exited = threading.Event()
        self._stop = threading.Event()
        self._beat_stop = threading.Event()
        # Guards _running, _taking, _held and the fence's state below; never held across I/O.
        self._lock = threading.Lock()
        self._running = {}  # id(ctx) -> CVJobContext
        self._taking = 0  # threads inside take(), which may still move a message
        self._held = Counter()  # raw message -> how many copies threads are serving
        self._suspects = Counter()  # orphans seen in the processing list at the last beat
        self._threads = []
        self._heartbeat = None
        self._started_at = time.time()
        # The fence's state, all monotonic:
        self._beat_sent_at = None  # when the last heartbeat write that succeeded was sent
        self._fenced_at = None  # when the jobs were fenced; None while heartbeats succeed
        self._heard_at = time.monotonic()  # when a Redis call last succeeded
        self._down_since = None  # when Redis began failing; None while it answers

    @property
    def fenced(self):
        """Cut off from Redis for long enough that no job may start or go on."""
        return self._fenced_at is not None

    @property
    def redis_down(self):
        return self._down_since is not None

    @property
    def stopping(self):
        return self._stop.is_set()

    def request_stop(self):
        """Stop taking jobs; running ones get CV_SHUTDOWN_GRACE_S to finish (from any thread;
        a signal handler goes through jobs/runtime/stopsignals.py)."""
        self._stop.set()

    def run(self):
        """Warm up, announce, serve until `request_stop()`, then shut down gracefully."""
        try:
            logger.info("CV worker %s starting: types %s, concurrency %d",
                        self.worker_id, ",".join(self.types), self.concurrency)
            for job_type in self.types:
                warmup = _handlers[job_type].warmup
                if warmup is not None:
                    warmup()
            # Announce only now: a heartbeat means "can serve", so the engine
            # never counts a worker that is still loading its models.
            if self.stopping or self._retry(self.transport.return_own, self.worker_id) is None \
                    or self._retry(self._beat) is None:
                return
            self.ready.set()
            logger.info("CV worker %s ready", self.worker_id)
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="cv-heartbeat",
                                               daemon=True)
            self._heartbeat.start()
            threading.Thread(target=self._fence_loop, name="cv-fence", daemon=True).start()
            # Daemon threads: a handler that ignores every stop request must
            # not keep the process alive once its job is handed back.
            self._threads = [threading.Thread(target=self._serve_loop, name=f"cv-job-{n}", daemon=True)
                             for n in range(self.concurrency)]
            for thread in self._threads:
                thread.start()
            # A timed wait, so the main thread gets to run signal handlers.
            while not self._stop.wait(1.0):
                pass
            self._shutdown()
        finally:
            self._beat_stop.set()
            if self._heartbeat is not None:
                # Its beat may be using the client: closing it under that call would end
                # the thread with an error instead of a clean stop.
                self._heartbeat.join(clients.SOCKET_TIMEOUT_S + 1)
            self.client.close()
            self.exited.set()

    # --- the life of one job ---

    def _serve_loop(self):
        backoff = _Backoff()
        while not self._stop.is_set():
            if self.fenced:
                # A job taken now could be given to another worker while it runs.
                self._stop.wait(TAKE_WAIT_S)
                continue
            with self._lock:
                self._taking += 1
            taken = None
            try:
                taken = self.transport.take(self.types, self.worker_id, TAKE_WAIT_S)
                if taken is not None and self._stop.is_set():
                    # Taken as shutdown began: give it straight back, not admitted.
                    job_type, raw = taken
                    self._retry(self.transport.put_back, job_type, raw, self.worker_id,
                                until_killed=True)
                    taken = None
            except RedisError as exc:
                taken = None  # a move whose reply was lost is found by _return_orphans
                self._pause_after(exc, backoff)
                continue
            finally:
                with self._lock:
                    self._taking -= 1
                    if taken is not None:
                        self._held[taken[1]] += 1
            backoff.failures = 0
            self.redis_answered()
            if taken is not None:
                try:
                    self._serve(*taken)
                finally:
                    with self._lock:
                        self._held[taken[1]] -= 1
                        if self._held[taken[1]] <= 0:
                            del self._held[taken[1]]

    def _serve(self, queue_type, raw):
        try:
            message = parse_message(raw, max_bytes=self.config.max_message_bytes,
                                    known_types=self.types, queue_type=queue_type)
        except PoisonMessage as exc:
            logger.warning("dead-lettering a message from the %s queue: %s", queue_type, exc.reason)
            self._retry(self.transport.dead_letter, raw, exc, self.worker_id)
            return
        try:
            # Unique to this delivery, so an admission retried after a lost reply
            # recognises its own win, and a second copy does not.
            taker = f"{self.worker_id}:{secrets.token_hex(6)}"
            admission = self._retry(self.transport.admit, message, taker)
            if admission is None:
                return  # stopping with Redis away: the reaper returns the message later
            if admission is Admission.RUN:
                self._run(message, taker)
                return
            logger.info("not running job %s attempt %d: %s", message.job_id, message.attempt,
                        admission)
            status = None
            if admission is Admission.CANCELLED:
                status = new_status(message.job_id, message.attempt, State.FAILED, error_code="cancelled",
                                    error=gettext("Cancelled before it started."), worker=self.worker_id)
            self._retry(self.transport.finish, message, self.worker_id, status, taker)
        except Exception as exc:  # noqa: BLE001 - a bug here must not kill the thread or loop on the message
            logger.exception("CV worker error on job %s; dead-lettering it", message.job_id)
            error = PoisonMessage(f"worker error: {exc.__class__.__name__}: {exc}",
                                  message.job_id, message.attempt)
            self._retry(self.transport.dead_letter, raw, error, self.worker_id)

    def _run(self, message, taker=None):
        ctx = CVJobContext(self, message, taker)
        with self._lock:
            # Checked under the lock the fence takes: a job registered here is
            # one the fence sees, and none starts once it has fired.
            fenced = self.fenced
            if not fenced:
                self._running[id(ctx)] = ctx
        if fenced:
            self._hand_back(ctx)  # admitted as the worker was cut off: never started
            return
        try:
            self._execute(ctx)
        finally:
            with self._lock:
                self._running.pop(id(ctx), None)

    def _execute(self, ctx):
        try:
            report = self._attempt(ctx)
        finally:
            ctx.ended.set()
        if report is _HAND_BACK:
            self._hand_back(ctx)
        elif report is not None:
            with ctx.write_lock:
                recorded = self._retry(self.transport.finish, ctx.message, self.worker_id, report,
                                       ctx.taker, until_killed=True)
            if not recorded:
                logger.warning("job %s attempt %d: outcome not recorded: the attempt is no longer "
                               "this worker's", ctx.job_id, ctx.attempt)

    def _attempt(self, ctx):
        """Run the handler and store its result; returns the final status to
        report, _HAND_BACK, or None when there is nothing to report."""
        message = ctx.message
        try:
            self.transport.write_status(dict(ctx.status), ctx.taker)
        except RedisError as exc:
            self.redis_failed(exc)
            logger.warning("job %s: could not mark it running: %s", message.job_id, exc)
        result, error = None, None
        if not ctx.fenced:  # fenced while being marked running: never started
            try:
                ctx.work_dir.mkdir(parents=True, exist_ok=True)
                result = _handlers[message.type].func(ctx, message.payload)
            except BaseException as exc:  # noqa: BLE001 - any handler failure is reported, not raised
                # A sys.exit() in a handler is that job failing: let through, it
                # would end this thread with the job left running.
                error = exc
        with ctx.lock:
            outcome = ctx.outcome
            if outcome is None:
                ctx.outcome = "finished"
        if outcome == FENCED:
            return _HAND_BACK  # whatever the handler did is not reported: the attempt may be another's
        if outcome is not None:
            return None  # shutdown handed it back while the handler ran on past the grace
        if ctx.cancelled:
            return self._final(ctx, State.FAILED, error_code="cancelled", error=gettext("Cancelled."))
        if ctx.stop_seen:
            return _HAND_BACK
        if error is not None:
            logger.info("job %s attempt %d failed: %r", message.job_id, message.attempt, error)
            code = getattr(error, "code", None)
            return self._final(ctx, State.FAILED, error=str(error) or error.__class__.__name__,
                               error_code=code if isinstance(code, str) else error.__class__.__name__)
        return self._store_result(ctx, result)

    def _store_result(self, ctx, result):
        if not isinstance(result, dict):
            return self._final(ctx, State.FAILED, error_code="bad_result",
                               error=f"the handler returned {type(result).__name__}, not a dict")
        relative = result_path(ctx.job_id, ctx.attempt)
        try:
            files.write_json_atomic(Path(settings.MEDIA_ROOT) / relative, result)
        except (TypeError, ValueError) as exc:
            return self._final(ctx, State.FAILED, error_code="bad_result", error=f"result is not JSON: {exc}")
        except OSError as exc:
            logger.error("job %s: result not written to %s: %s", ctx.job_id, relative, exc)
            return self._final(ctx, State.FAILED, error_code="result_not_written", error=str(exc))
        return self._final(ctx, State.DONE, fraction=1.0, result=relative)

    def _final(self, ctx, state, **fields):
        with ctx.lock:
            progress = {k: ctx.status[k] for k in ("fraction", "phase", "message")}
        return new_status(ctx.job_id, ctx.attempt, state, worker=self.worker_id, **{**progress, **fields})

    def _hand_back(self, ctx):
        status = new_status(ctx.job_id, ctx.attempt, State.QUEUED, worker=self.worker_id,
                            message=gettext("Handed back: the CV worker stopped before finishing it."))
        with ctx.write_lock:
            moved = self._retry(self.transport.hand_back, ctx.message, self.worker_id, status,
                                until_killed=True)
        if moved:
            logger.info("job %s attempt %d handed back", ctx.job_id, ctx.attempt)
        else:
            logger.info("job %s attempt %d: nothing to hand back, a reaper returned it as this "
                        "worker's heartbeat lapsed", ctx.job_id, ctx.attempt)

    # --- heartbeat and shutdown ---

    def _beat(self):
        with self._lock:
            running = list(self._running.values())
        info = {
            "worker_id": self.worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "types": self.types, "concurrency": self.concurrency, "started": self._started_at,
            "jobs": [ctx.job_id for ctx in running], "beat_at": time.time(),
        }
        # Taken before the write goes out: Redis starts the key's TTL later than this.
        sent = time.monotonic()
        self.transport.beat(self.worker_id, info, [ctx.job_id for ctx in running])
        self._beat_written(sent)
        for ctx in running:
            ctx.flush()  # progress the throttle (or an outage) held back
        reminders = []
        for ctx in running:
            with ctx.lock:
                if ctx.outcome is None and ctx.taker is not None:
                    reminders.append((ctx.message, ctx.taker, dict(ctx.status)))
        # After a Redis restart that lost everything, within one beat: until
        # then the engine waits (CV_HEARTBEAT_TTL_S) before it sends them again.
        for job_id in self.transport.remind(self.worker_id, reminders):
            logger.warning("CV worker %s: Redis had forgotten running job %s; registered it again",
                           self.worker_id, job_id)
        return True

    def _heartbeat_loop(self):
        # Its own thread, so a long job never lets the heartbeat lapse.
        while not self._beat_stop.wait(self.config.heartbeat_interval_s):
            try:
                self._beat()
                self.transport.reap_dead_workers()
                self._return_orphans()
            except (RedisError, OSError) as exc:
                # OSError: the client's socket closed under us (shutdown, a
                # reset); the heartbeat thread must outlive it like a Redis error.
                self.redis_failed(exc)

    def _beat_written(self, sent):
        """A heartbeat write sent at `sent` (monotonic) succeeded: the key lives
        until `sent + TTL` at least, and jobs may start again."""
        with self._lock:
            self._beat_sent_at = sent if self._beat_sent_at is None else max(self._beat_sent_at, sent)
            lifted = self._fenced_at is not None
            self._fenced_at = None
        self.redis_answered()
        if lifted:
            logger.info("CV worker %s: heartbeat written again; taking jobs again", self.worker_id)

    # --- the fence (no I/O here: it must act on time whatever Redis or the network does) ---

    def _fence_loop(self):
        while not self._beat_stop.wait(FENCE_TICK_S):
            self._check_fence(time.monotonic())

    def _check_fence(self, now):
        """Fence the running jobs once the heartbeat's lapse is a margin away;
        end the process when a fenced handler runs on past its `exit_at`."""
        with self._lock:
            lapses_at = self._beat_sent_at + self.config.heartbeat_ttl_s
            heard_at = self._heard_at
            running = [ctx for ctx in self._running.values() if not ctx.ended.is_set()]
            fencing = self._fenced_at is None and now >= lapses_at - self.margin_s
            if fencing:
                self._fenced_at = now
        if fencing:
            for ctx in running:
                ctx.fence(lapses_at - self.margin_s / 4)
            logger.warning("CV worker %s: Redis unreachable for %.1f s: stopping %d job(s) whose "
                           "heartbeat lapses in %.1f s; taking no new ones until a heartbeat is written",
                           self.worker_id, now - heard_at, len(running), lapses_at - now)
            return
        for ctx in running:
            if ctx.exit_at is not None and now >= ctx.exit_at:
                self._end_process(ctx, ctx.exit_at + self.margin_s / 4 - now)

    def _end_process(self, ctx, lapse_in_s):
        """A fenced handler did not stop: end the process before the job can be given to another."""
        if self.own_process:
            logger.critical("CV worker %s: the handler of job %s attempt %d did not stop and the "
                            "heartbeat lapses in %.2f s: the worker ends itself (exit code %d) so that it "
                            "never runs beside the job's next attempt", self.worker_id, ctx.job_id,
                            ctx.attempt, lapse_in_s, FENCE_EXIT_CODE)
            os._exit(FENCE_EXIT_CODE)
        with ctx.lock:
            ctx.exit_at = None  # said once
        logger.critical("CV worker %s: the handler of job %s attempt %d did not stop and the heartbeat "
                        "lapses in %.2f s: it may run beside the job's next attempt (an embedded worker "
                        "does not end the process it shares)", self.worker_id, ctx.job_id, ctx.attempt,
                        lapse_in_s)

    def _return_orphans(self):
        """Return messages in this worker's processing list that no thread serves.

        A BLMOVE whose reply was lost (the connection broke just then) leaves
        its message in the processing list of a worker that lives on, where
        the reaper never looks. An item counts as orphaned only when two beats
        in a row find it unserved, so one just taken and not yet registered is
        never mistaken for one.
        """
        items = Counter(self.transport.held_by(self.worker_id))
        with self._lock:
            orphans = items - self._held
        confirmed = orphans & self._suspects
        self._suspects = orphans - confirmed
        for raw, copies in confirmed.items():
            for _ in range(copies):
                logger.warning("CV worker %s: returning a message it took but never served", self.worker_id)
                try:
                    message = parse_message(raw, max_bytes=self.config.max_message_bytes)
                except PoisonMessage as exc:
                    self.transport.dead_letter(raw, exc, self.worker_id)
                else:
                    self.transport.put_back(message.type, raw, self.worker_id)

    def _shutdown(self):
        logger.info("CV worker %s stopping: no new jobs; %d running, grace %ss",
                    self.worker_id, len(self._running), self.config.shutdown_grace_s)
        # Threads still inside take() may move one more message; they give it back.
        self._wait(lambda: self._taking == 0, TAKE_WAIT_S + 1)
        self._wait(lambda: not self._running, self.config.shutdown_grace_s)
        with self._lock:
            late = list(self._running.values())
        for ctx in late:
            with ctx.lock:
                # A fenced job whose handler runs on goes back too: the worker leaves.
                # One whose handler returned is being handed back by its own thread.
                fenced_running = ctx.outcome == FENCED and not ctx.ended.is_set()
                if ctx.outcome is not None and not fenced_running:
                    continue  # it has just finished and is recording that
                ctx.outcome = "handed_back"
            self._hand_back(ctx)
        # Jobs that had just finished get a moment to record it (one file, one MULTI).
        self._wait(lambda: all(ctx.outcome != "finished" for ctx in list(self._running.values())), 5)
        self._beat_stop.set()
        if self._heartbeat is not None:
            # A beat under way would write the heartbeat again after its deletion,
            # announcing a worker that is gone for the heartbeat's lifetime.
            self._heartbeat.join(clients.SOCKET_TIMEOUT_S + 1)
        try:
            self.transport.drop_heartbeat(self.worker_id)
        except RedisError as exc:
            logger.warning("heartbeat of %s not deleted (it expires on its own): %s", self.worker_id, exc)
        logger.info("CV worker %s stopped", self.worker_id)

    @staticmethod
    def _wait(condition, timeout_s):
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.05)

    # --- Redis trouble ---

    def _retry(self, step, *args, until_killed=False):
        """Run a Redis step until it succeeds and return its result.

        Gives up (returning None) once the worker is stopping, unless
        `until_killed`: recording a finished job or a hand-back is worth
        waiting for until the process is killed.
        """
        backoff = _Backoff()
        while True:
            try:
                result = step(*args)
            except RedisError as exc:
                if self._stop.is_set() and not until_killed:
                    return None
                self._pause_after(exc, backoff)
            else:
                self.redis_answered()
                return result

    def _pause_after(self, exc, backoff):
        self.redis_failed(exc)
        delay_s = backoff.next_s()
        if self._stop.is_set():
            time.sleep(delay_s)
        else:
            self._stop.wait(delay_s)  # a stop request cuts the pause short

    def redis_failed(self, exc):
        """A Redis call failed (from any thread): said once per outage, not once per retry."""
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
        if first:
            logger.warning("CV worker %s: Redis error, retrying: %s: %s",
                           self.worker_id, exc.__class__.__name__, exc)
        else:
            logger.debug("CV worker %s: Redis still failing: %s", self.worker_id, exc)

    def redis_answered(self):
        """A Redis call succeeded (from any thread): the end of an outage is said once."""
        now = time.monotonic()
        with self._lock:
            heard_at, self._heard_at = self._heard_at, now
            was_down = self._down_since is not None
            self._down_since = None
        if was_down:
            logger.info("CV worker %s: Redis is reachable again after %.1f s", self.worker_id,
                        now - heard_at)


def start_embedded_worker(types=None, concurrency=1, **options):
    """Run a CV worker in a daemon thread of this process (local mode); returns the CVWorker.

    Stop it with `worker.request_stop()` and wait on `worker.exited`. It never
    ends the process it shares (`own_process`), unless told to.
    """
    options.setdefault("own_process", False)
    discover_handlers()
    worker = CVWorker(types=types, concurrency=concurrency, **options)
    threading.Thread(target=worker.run, name="cv-worker", daemon=True).start()
    return worker
