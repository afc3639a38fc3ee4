"""The `redis` execution mode, engine side: jobs forwarded to the CV worker fleet.

The runworker claims a redis-mode job like any other, publishes it to Redis
and hands it to its `Monitor`; publishing frees the executor slot, and the
queue's global limit bounds how many are in flight. The Job row stays the
durable record: the monitor renews its lease, mirrors progress from the
status key, ingests the result file (never only in Redis), routes cancel and
pause requests, and republishes an attempt Redis lost.
"""

import logging
import threading
import time
from pathlib import Path

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connection, transaction
from django.utils.translation import gettext as _

from jobs import conf, services
from jobs.cv import clients, files
from jobs.cv.transport import State, Transport, result_path
from jobs.engine import outcome, registry
from jobs.exceptions import Fail, TransportUnavailable
from jobs.models import Job, JobStatus, Outcome

log = logging.getLogger(__name__)

TICK_S = 0.5
# Redis outages requeue a claimed job after this delay, without spending an attempt
# (with TransportUnavailable.code as its error code, which pages explain).
UNAVAILABLE_RETRY_S = 5.0
# After a publish failed, further claimed jobs go back without trying for this long: each
# try against a stalled Redis costs a whole socket timeout.
UNAVAILABLE_SKIP_S = 1.0


def check_transport(kind):
    """Raise TransportUnavailable when `kind` goes through Redis and Redis does not answer.

    For requests that ask for a CV job: a dead Redis is said at once (the
    caller answers 503) instead of queueing a job that cannot be sent. Local
    mode and kinds of other modes always pass.
    """
    policy = registry.get(kind).policy
    if policy.mode != "redis":
        return
    problem = clients.ping()  # None in local mode
    if problem:
        raise TransportUnavailable(
            _("The CV queue “%(queue)s” cannot take jobs: its Redis server is unreachable. "
              "Try again in a moment.") % {"queue": policy.queue},
            queue=policy.queue, detail=problem)


def cv_type(job):
    return registry.get(job.kind).policy.options.get("cv_type") or job.kind.rsplit(".", 1)[-1]


class Monitor(threading.Thread):
    """One per runworker: watches every CV job this worker published."""

    def __init__(self, worker):
        super().__init__(name="haulage-cv-monitor", daemon=True)
        self.worker = worker
        self.inflight = {}  # job id -> Job as claimed
        self.seen = {}  # job id -> last mirrored (state, fraction, phase, message)
        self.missing = {}  # job id -> monotonic time Redis was first found not to know its attempt
        # Watched but not sent yet: nothing to follow, and above all nothing
        # for `lost` to publish, or the attempt would go out twice.
        self.unsent = set()
        self.asked = {}  # job id -> the stop asked of it (an Outcome), once routed to Redis
        self.lock = threading.Lock()
        self.transport = Transport(clients.get_client())
        self.embedded = None
        self.unavailable_until = 0.0  # monotonic; see UNAVAILABLE_SKIP_S

    # Called from the worker's main loop when it claims a redis-mode job.
    def adopt(self, jobs):
        """Watch CV jobs claimed together, then send each to the CV fleet."""
        # All are watched (their leases renewed) before the first is sent:
        # publishing to a stalled Redis takes a socket timeout, and the jobs
        # claimed with it wait their turn meanwhile; none may lose its lease.
        with self.lock:
            for job in jobs:
                self.inflight[job.pk] = job
                self.unsent.add(job.pk)
        for job in jobs:
            try:
                self.send(job)
            finally:
                with self.lock:
                    self.unsent.discard(job.pk)

    def send(self, job):
        with self.lock:
            if job.pk not in self.inflight:
                return  # its lease went while it waited its turn: no longer ours to send
        try:
            if time.monotonic() < self.unavailable_until:
                raise redis.ConnectionError("a publish failed a moment ago")
            current = self.transport.status(str(job.pk))
            # A requeued job keeps its attempt number: if that attempt is
            # still known to Redis, keep watching it instead of sending it twice.
            if not (current and current.get("attempt") == job.attempts
                    and current.get("state") in (State.QUEUED, State.RUNNING, State.DONE)):
                self.publish(job)
        except redis.RedisError as exc:
            self.unavailable_until = time.monotonic() + UNAVAILABLE_SKIP_S
            log.warning("Redis unavailable, job %s goes back to the queue: %s", job.pk, exc)
            with self.lock:
                self.inflight.pop(job.pk, None)
            outcome.record(job, Outcome.REQUEUED, delay_s=UNAVAILABLE_RETRY_S,
                           code=TransportUnavailable.code,
                           error=_("The CV queue's Redis server is unreachable; the job waits and "
                                   "is sent again shortly."))

    def run(self):
        if clients.is_local_mode():
            from jobs.cv.worker import start_embedded_worker

            try:
                self.embedded = start_embedded_worker(concurrency=conf.JOBS_EMBEDDED_CV_CONCURRENCY)
            except ImproperlyConfigured as exc:
                log.warning("no embedded CV worker (%s); CV jobs wait for one", exc)
        # Leases are renewed from the database in a thread of their own: a
        # stalled Redis blocks every call here for a whole socket timeout,
        # which must not let the leases of healthy CV jobs run out.
        threading.Thread(target=self.renew_loop, name="haulage-cv-leases", daemon=True).start()
        next_reap = 0.0
        while not self.worker.exited.is_set():
            try:
                if time.monotonic() >= next_reap:
                    # At least once per CV heartbeat: a reaper that hears Redis
                    # less often than that doubts every missing heartbeat.
                    next_reap = time.monotonic() + min(conf.JOBS_HEARTBEAT_SECONDS,
                                                       self.transport.config.heartbeat_interval_s)
                    self.transport.reap_dead_workers()
                self.tick()
            except (DatabaseError, redis.RedisError) as exc:
                # A Redis outage only delays jobs; a database outage ends in a rescue at worst.
                log.warning("CV monitor: %s", exc.__class__.__name__)
                self.worker.reset_connection()
            except Exception:  # noqa: BLE001 - the monitor must outlive any one job
                log.exception("CV monitor error")
            self.worker.exited.wait(TICK_S)
        if self.embedded is not None:
            self.embedded.request_stop()
        connection.close()

    def renew_loop(self):
        try:
            while not self.worker.exited.wait(conf.JOBS_HEARTBEAT_SECONDS):
                try:
                    self.renew()
                except DatabaseError as exc:
                    log.warning("CV monitor: leases not renewed: %s", exc.__class__.__name__)
                    self.worker.reset_connection()
                except Exception:  # noqa: BLE001 - the renewals must outlive any one failure
                    log.exception("CV monitor: leases not renewed")
        finally:
            connection.close()

    def renew(self):
        with self.lock:
            jobs = list(self.inflight.values())
        kept = services.renew_leases(self.worker.row, jobs)
        for job in jobs:
            if job.pk not in kept:
                log.info("CV job %s lost its lease; no longer watched here", job.pk)
                self.forget(job)

    def tick(self):
        with self.lock:
            jobs = [job for pk, job in self.inflight.items() if pk not in self.unsent]
        if not jobs:
            return
        asked = dict(
            Job.objects.filter(pk__in=[j.pk for j in jobs], status=JobStatus.RUNNING)
            .exclude(stop_requested="").values_list("pk", "stop_requested")
        )
        for job in jobs:
            if job.pk in asked:
                # CV workers can only cancel; a pause asked of a CV job ends it
                # as PAUSED once its worker has stopped it.
                self.asked[job.pk] = asked[job.pk]
                self.transport.cancel(str(job.pk))
            self.follow(job)

    def follow(self, job):
        key = str(job.pk)
        status = self.transport.status(key)
        if not status or status.get("attempt") != job.attempts:
            if self.transport.is_pending(key, job.attempts):
                self.missing.pop(job.pk, None)
                return
            self.lost(job)
            return
        self.missing.pop(job.pk, None)
        state = status.get("state")
        if state == State.DONE:
            self.ingest(job, status)
        elif state == State.FAILED:
            self.failed(job, status)
        else:
            self.mirror(job, status)

    def lost(self, job):
        """Redis does not know the job's attempt (it restarted empty): finish it from its result
        file if the attempt got that far, else publish it again once no CV worker takes it.

        A CV worker still running the attempt registers it again at its next
        heartbeat (`Transport.remind`); sending it before then would have a
        second worker run it alongside, so the attempt must stay unknown for a
        whole heartbeat TTL first.
        """
        key = str(job.pk)
        relative = result_path(key, job.attempts)
        if (Path(settings.MEDIA_ROOT) / relative).is_file():
            # The worker wrote the result (atomically) before its status: Redis
            # is never a result's only copy.
            log.warning("Redis lost the status of CV job %s; ingesting its result file", job.pk)
            self.missing.pop(job.pk, None)
            self.ingest(job, {"result": relative})
            return
        first = self.missing.setdefault(job.pk, time.monotonic())
        if time.monotonic() - first < self.transport.config.heartbeat_ttl_s:
            return
        log.warning("Redis lost CV job %s (attempt %s); publishing it again", job.pk, job.attempts)
        self.publish(job)
        self.missing.pop(job.pk, None)

    def publish(self, job):
        """Send one attempt to the CV fleet, afresh.

        A result file already at this attempt's path predates the attempt (a
        database reset makes job ids start again while MEDIA_ROOT keeps the
        old files): it goes first, so `lost` never takes it for this attempt's.
        """
        key = str(job.pk)
        (Path(settings.MEDIA_ROOT) / result_path(key, job.attempts)).unlink(missing_ok=True)
        self.transport.publish(cv_type(job), key, job.attempts, job.payload)

    def mirror(self, job, status):
        if status.get("state") == State.QUEUED and not self.transport.live_workers([cv_type(job)]):
            snapshot = (None, _("Waiting: no CV worker is running."))
            phase, message, fraction = "queued", snapshot[1], None
        else:
            fraction, phase, message = status.get("fraction"), status.get("phase"), status.get("message")
            snapshot = (fraction, phase, message)
        if self.seen.get(job.pk) == snapshot:
            return
        self.seen[job.pk] = snapshot
        if not services.report_progress(job, fraction=fraction, phase=phase or "", message=message or ""):
            self.forget(job)

    def ingest(self, job, status):
        policy = registry.get(job.kind).policy
        path = Path(settings.MEDIA_ROOT) / status["result"]
        try:
            data = files.read_json(path)
            with transaction.atomic():
                result = policy.ingest(job, data) if policy.ingest else None
                outcome.record(job, Outcome.SUCCEEDED,
                               result=result if result is not None else {"result": status["result"]})
        except DatabaseError:
            raise  # the monitor backs off and tries the same ingest again
        except Exception as exc:  # noqa: BLE001 - a result that cannot be ingested fails the job
            # Retrying the same document would fail the same way forever.
            log.exception("CV job %s: result %s could not be ingested", job.pk, path)
            permanent = isinstance(exc, (Fail, OSError, ValueError))
            outcome.record(job, Outcome.FAILED if permanent else Outcome.RETRY, exc=exc,
                           error=f"{type(exc).__name__}: {exc}", code=getattr(exc, "code", "ingest"))
        self.transport.clear(str(job.pk))
        self.forget(job)

    def failed(self, job, status):
        code = status.get("error_code") or "error"
        if code == "cancelled" and job.pk in self.asked:
            outcome.record(job, self.asked[job.pk], error=status.get("error") or "")
        else:
            outcome.record(job, Outcome.FAILED if code == "rejected" else Outcome.RETRY, code=code,
                           error=status.get("error") or _("The CV job failed."))
        self.transport.clear(str(job.pk))
        self.forget(job)

    def forget(self, job):
        with self.lock:
            self.inflight.pop(job.pk, None)
        self.seen.pop(job.pk, None)
        self.missing.pop(job.pk, None)
        self.asked.pop(job.pk, None)
        self.worker.wake.set()

    def hand_back_all(self):
        """At shutdown: give every watched job back to the queue, attempt kept.

        The CV fleet keeps working on them; whichever runworker claims one
        next finds its attempt in Redis and watches it instead of resending.
        """
        with self.lock:
            jobs = list(self.inflight.values())
            self.inflight.clear()
        for job in jobs:
            try:
                outcome.record(job, Outcome.REQUEUED,
                               error=_("The worker watching this CV job shut down."))
            except DatabaseError:
                log.warning("could not hand back CV job %s; its lease will expire", job.pk)
