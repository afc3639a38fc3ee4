"""The Redis channel between the engine and the CV worker fleet.

The engine keeps the Job row as the durable record; Redis only carries work
out and progress back. Glossary:

message      JSON `{"v": 1, "job_id", "attempt", "type", "payload"}` in a queue.
queue        one Redis list per job type; LPUSH to publish, workers take from
             the right end (oldest first).
processing   one list per CV worker; a message moves there atomically when a
             worker takes it (BLMOVE), so a worker that dies holding it loses
             nothing: the reaper moves it back once the heartbeat expires.
status       one key per job (JSON, with a TTL): attempt, state, progress,
             and the result path or the error. The engine mirrors it.
heartbeat    one key per CV worker (JSON, with a TTL), set only once the
             worker can serve, renewed by its own thread, deleted on exit.
seen         one key per (job, attempt) taken, naming the worker that took it:
             a second delivery of the same attempt is dropped, not run twice.
             A worker's reports of an attempt (running, progress, outcome)
             are written only while this key still names its delivery, so a
             late report of an attempt the reaper gave to another worker is
             refused, wherever the network held it.
registries   a set of the job types ever published and a set of the workers
             that may hold a processing list, so nothing needs a SCAN of the
             whole keyspace.
dead letter  a capped list of messages no worker can run, with the reason.
result       a JSON file under MEDIA_ROOT written atomically by the worker;
             the status only points at it. Redis is never its only copy.

Every Redis command of the protocol is a method of `Transport`. The engine
uses the first group (publish .. queue_lengths); `jobs.cv.worker` the second.
"""

import enum
import itertools
import json
import logging
import re
import time
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import RedisError, WatchError

from jobs import conf
from jobs.cv import clients

logger = logging.getLogger(__name__)

QUEUE_KEY = "{prefix}:jobs:{type}"
PROCESSING_KEY = "{prefix}:processing:{worker_id}"
STATUS_KEY = "{prefix}:status:{job_id}"
WORKER_KEY = "{prefix}:worker:{worker_id}"
CANCEL_KEY = "{prefix}:cancel:{job_id}"
SEEN_KEY = "{prefix}:seen:{job_id}:{attempt}"
DEAD_KEY = "{prefix}:dead"
QUEUES_KEY = "{prefix}:queues"
WORKERS_KEY = "{prefix}:workers"
# Relative to MEDIA_ROOT, so engine and workers agree on shared storage.
RESULT_PATH = "cv/{job_id}/{attempt}.json"

MESSAGE_VERSION = 1
DEAD_LETTERS_KEPT = 1000
# Job ids, types and worker ids become key names and (job ids) folder names:
# letters, digits, "_", "." and "-" only, and never a leading dot.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# A dead letter keeps at most this much of a message that was too large.
DEAD_RAW_CHARS = 4096


class State(enum.StrEnum):
    QUEUED = "queued"  # published (or handed back) and waiting for a worker
    RUNNING = "running"  # a worker runs the handler; progress fields move
    DONE = "done"  # the result file is written; `result` is its path
    FAILED = "failed"  # `error_code` and `error` say why; the engine decides on retries


class Admission(enum.StrEnum):
    """What a CV worker does with a message it took (`Transport.admit`)."""

    RUN = "run"
    DUPLICATE = "duplicate"  # the same attempt is already taken by a worker
    FINISHED = "finished"  # the status already reports this attempt done or failed
    SUPERSEDED = "superseded"  # the status belongs to a later attempt
    CANCELLED = "cancelled"  # the engine asked to cancel before it started


class MessageTooLarge(ValueError):
    """The encoded message exceeds CV_MAX_MESSAGE_BYTES; put large inputs in files and pass paths."""


class PoisonMessage(ValueError):
    """A queued message no worker can run; `reason` says why, and it goes to the dead letters."""

    def __init__(self, reason, job_id=None, attempt=None):
        super().__init__(reason)
        self.reason = reason
        self.job_id = job_id
        self.attempt = attempt


# --- Settings ---------------------------------------------------------------


@dataclass(frozen=True)
class CVConfig:
    """The CV transport's knobs (jobs/conf.py has each with its default and unit)."""

    prefix: str = "haulage"
    heartbeat_ttl_s: float = 15
    heartbeat_interval_s: float = 5
    status_ttl_s: float = 3600
    dedupe_ttl_s: float = 86400
    max_message_bytes: int = 262144
    shutdown_grace_s: float = 30

    @classmethod
    def from_settings(cls):
        config = cls(
            prefix=conf.CV_REDIS_PREFIX or "haulage",
            heartbeat_ttl_s=conf.CV_HEARTBEAT_TTL_S,
            heartbeat_interval_s=conf.CV_HEARTBEAT_INTERVAL_S,
            status_ttl_s=conf.CV_STATUS_TTL_S,
            dedupe_ttl_s=conf.CV_DEDUPE_TTL_S,
            max_message_bytes=conf.CV_MAX_MESSAGE_BYTES,
            shutdown_grace_s=conf.CV_SHUTDOWN_GRACE_S,
        )
        config.check()
        return config

    def check(self):
        if not re.fullmatch(r"[A-Za-z0-9_.:-]+", self.prefix):
            raise ImproperlyConfigured(
                f"CV_REDIS_PREFIX may hold only letters, digits and _ . : -, not {self.prefix!r}."
            )
        if self.heartbeat_interval_s * 2 > self.heartbeat_ttl_s:
            raise ImproperlyConfigured(
                "CV_HEARTBEAT_INTERVAL_S must be at most half of CV_HEARTBEAT_TTL_S: a live "
                "worker's heartbeat must outlast one late beat, and a reaper must hear from "
                "Redis at least once between beats to tell a death from a stall."
            )

    @property
    def answer_gap_s(self):
        """The longest silence of Redis a reaper may miss without doubting heartbeats.

        A stall shorter than this cannot have expired a live worker's heartbeat
        (it beats every interval, the key lives a TTL), so a reaper that heard
        Redis answer at least this often saw every stall that could matter.
        """
        return self.heartbeat_ttl_s - self.heartbeat_interval_s


# --- Messages ---------------------------------------------------------------


def check_name(what, value):
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValueError(f"{what} must match {NAME_RE.pattern}, not {value!r}.")
    return value


def encode_message(job_type, job_id, attempt, payload):
    return json.dumps(
        {"v": MESSAGE_VERSION, "job_id": job_id, "attempt": attempt, "type": job_type, "payload": payload},
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class Message:
    job_id: str
    attempt: int
    type: str
    payload: dict
    # Exactly as read from Redis: LREM removes a list item by its value.
    raw: bytes | str


def parse_message(raw, *, max_bytes, known_types=None, queue_type=None):
    """A validated Message, or PoisonMessage saying what is wrong with `raw`."""
    size = len(raw)
    if size > max_bytes:
        raise PoisonMessage(f"too large: {size} bytes, the limit is {max_bytes}")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = json.loads(text)
    except UnicodeDecodeError:
        raise PoisonMessage("not UTF-8 text") from None
    except ValueError:
        raise PoisonMessage("not JSON") from None
    if not isinstance(data, dict):
        raise PoisonMessage("not a JSON object")
    missing = [f for f in ("v", "job_id", "attempt", "type", "payload") if f not in data]
    if missing:
        raise PoisonMessage(f"missing fields: {', '.join(missing)}", data.get("job_id"), data.get("attempt"))
    job_id, attempt, job_type = data["job_id"], data["attempt"], data["type"]
    if data["v"] != MESSAGE_VERSION:
        raise PoisonMessage(f"unsupported version {data['v']!r} (this worker reads {MESSAGE_VERSION})",
                            job_id, attempt)
    if not isinstance(job_id, str) or not NAME_RE.fullmatch(job_id):
        raise PoisonMessage(f"bad job_id {job_id!r}")
    if type(attempt) is not int or attempt < 1:
        raise PoisonMessage(f"bad attempt {attempt!r}", job_id)
    if not isinstance(job_type, str) or not NAME_RE.fullmatch(job_type):
        raise PoisonMessage(f"bad type {job_type!r}", job_id, attempt)
    if known_types is not None and job_type not in known_types:
        raise PoisonMessage(f"unknown type {job_type!r}", job_id, attempt)
    if queue_type is not None and job_type != queue_type:
        raise PoisonMessage(f"type {job_type!r} in the {queue_type!r} queue", job_id, attempt)
    if not isinstance(data["payload"], dict):
        raise PoisonMessage("payload is not a JSON object", job_id, attempt)
    return Message(job_id, attempt, job_type, data["payload"], raw)


def new_status(job_id, attempt, state, **fields):
    """A complete status record; `fields` may set any of the keys below."""
    status = {
        "job_id": job_id, "attempt": attempt, "state": str(state),
        "fraction": 0.0, "phase": None, "message": None,
        "result": None, "error": None, "error_code": None, "worker": None,
        "updated_at": time.time(),
    }
    status.update(fields)
    return status


def result_path(job_id, attempt):
    """Where a result lives, relative to MEDIA_ROOT (what the status's `result` holds)."""
    return RESULT_PATH.format(job_id=check_name("job_id", job_id), attempt=int(attempt))


def _worker_of(taker):
    """The worker id in a seen key's "<worker id>:<token>" (worker ids hold no colon)."""
    return taker.partition(":")[0] if taker else None


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _loads(value):
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        logger.warning("ignoring a CV status or heartbeat that is not JSON: %.200r", value)
        return None


# --- The channel ------------------------------------------------------------


class Transport:
    """Every Redis command of the CV protocol. Thread-safe (redis-py pools connections).

    `client` may decode responses or not; the engine passes
    `clients.get_client()`, the CV worker a bytes client.
    """

    def __init__(self, client, prefix=None, *, config=None):
        self.client = client
        self.config = config or CVConfig.from_settings()
        self.prefix = prefix or self.config.prefix
        self._turn = itertools.count()
        self._trouble_at = None  # monotonic: when Redis last failed, stalled or went unheard
        self._answered_at = None  # monotonic: when a watched call of ours last got an answer

    # keys
    def queue_key(self, job_type):
        return QUEUE_KEY.format(prefix=self.prefix, type=job_type)

    def processing_key(self, worker_id):
        return PROCESSING_KEY.format(prefix=self.prefix, worker_id=worker_id)

    def status_key(self, job_id):
        return STATUS_KEY.format(prefix=self.prefix, job_id=job_id)

    def worker_key(self, worker_id):
        return WORKER_KEY.format(prefix=self.prefix, worker_id=worker_id)

    def cancel_key(self, job_id):
        return CANCEL_KEY.format(prefix=self.prefix, job_id=job_id)

    def seen_key(self, job_id, attempt):
        return SEEN_KEY.format(prefix=self.prefix, job_id=job_id, attempt=attempt)

    @property
    def dead_key(self):
        return DEAD_KEY.format(prefix=self.prefix)

    @property
    def queues_key(self):
        return QUEUES_KEY.format(prefix=self.prefix)

    @property
    def workers_key(self):
        return WORKERS_KEY.format(prefix=self.prefix)

    def _members(self, key):
        return sorted(_text(member) for member in self.client.smembers(key))

    # --- Engine side --------------------------------------------------------

    def publish(self, job_type, job_id, attempt, payload):
        """Queue one attempt of a job and mark its status queued, in one MULTI.

        Never retried automatically: when the reply is lost nobody knows
        whether the push happened, and a blind retry could queue the job
        twice. The caller treats a Redis error as "maybe published" and lets
        `is_pending` tell later; a duplicate that slips through runs once
        anyway (the seen key). Publishing resets the status to queued.
        """
        check_name("job type", job_type)
        check_name("job_id", job_id)
        if type(attempt) is not int or attempt < 1:
            raise ValueError(f"attempt must be a whole number from 1, not {attempt!r}.")
        raw = encode_message(job_type, job_id, attempt, payload)
        size = len(raw.encode("utf-8"))
        if size > self.config.max_message_bytes:
            raise MessageTooLarge(
                f"the {job_type} message for job {job_id} is {size} bytes, "
                f"over CV_MAX_MESSAGE_BYTES ({self.config.max_message_bytes})."
            )
        pipe = self.client.pipeline(transaction=True)
        pipe.lpush(self.queue_key(job_type), raw)
        pipe.sadd(self.queues_key, job_type)
        pipe.set(self.status_key(job_id), json.dumps(new_status(job_id, attempt, State.QUEUED)),
                 ex=int(self.config.status_ttl_s))
        pipe.execute()

    def status(self, job_id):
        """The job's status dict (see `new_status`), or None when Redis has none."""
        return _loads(self.watched(self.client.get, self.status_key(job_id)))

    def cancel(self, job_id):
        """Ask whichever worker runs (or will take) the job to stop it."""
        self.client.set(self.cancel_key(job_id), "1", ex=int(self.config.status_ttl_s))

    def clear(self, job_id):
        """Forget the job's status and cancel request (after the engine has ingested the outcome)."""
        self.client.delete(self.status_key(job_id), self.cancel_key(job_id))

    def is_pending(self, job_id, attempt):
        """Does Redis still know this attempt: queued, being processed, or reported?

        False means Redis lost it (a restart without persistence) and the
        engine should publish it again. One GET when the status key exists;
        otherwise a scan of the queues and processing lists, which only
        happens in that rare case. A message moving between lists during the
        scan can be missed: the republished duplicate is then dropped by the
        seen key, so a false "lost" costs a little work, never a double run.
        """
        if self._has_status(job_id, attempt):
            return True
        keys = [self.queue_key(job_type) for job_type in self._members(self.queues_key)]
        keys += [self.processing_key(worker_id) for worker_id in self._members(self.workers_key)]
        needle = json.dumps(job_id)
        for key in keys:
            for raw in self._iter_list(key):
                text = _text(raw)
                if needle not in text:
                    continue
                data = _loads(text)
                if isinstance(data, dict) and data.get("job_id") == job_id and data.get("attempt") == attempt:
                    return True
        # A worker may have taken it while we scanned: it has written a status since.
        return self._has_status(job_id, attempt)

    def _has_status(self, job_id, attempt):
        status = self.status(job_id)
        return bool(status) and status.get("attempt") == attempt

    def _iter_list(self, key, chunk=500):
        start = 0
        while True:
            items = self.client.lrange(key, start, start + chunk - 1)
            yield from items
            if len(items) < chunk:
                return
            start += chunk

    def live_workers(self, types=None):
        """Heartbeats of the CV workers alive now, optionally only those serving one of `types`."""
        keys = [self.worker_key(worker_id) for worker_id in self._members(self.workers_key)]
        beats = [_loads(value) for value in self.client.mget(keys)] if keys else []
        wanted = set(types or ())
        return [
            beat for beat in beats
            if isinstance(beat, dict) and (not wanted or wanted & set(beat.get("types", ())))
        ]

    def watched(self, step, *args, **kwargs):
        """Run one Redis step, noting trouble when Redis failed it, kept it waiting a
        heartbeat interval, or answered it longer than `answer_gap_s` after the last
        answer: a stall may have come and gone in that silence, unseen by this call
        (seen only by calls that are not watched, or by none)."""
        began = time.monotonic()
        try:
            result = step(*args, **kwargs)
        except RedisError:
            self._trouble_at = time.monotonic()
            raise
        now = time.monotonic()
        unheard = self._answered_at is not None and now - self._answered_at > self.config.answer_gap_s
        if unheard or now - began >= self.config.heartbeat_interval_s:
            self._trouble_at = now
        self._answered_at = now
        return result

    def trusts_heartbeats(self):
        """Whether a missing heartbeat means a dead worker: not within a heartbeat TTL of trouble.

        When Redis stalls (CLIENT PAUSE, a slow disk, a VM pause) for longer
        than the TTL, every heartbeat expires at once although every worker
        lives; taking that at its word would hand their running jobs to
        others, to run a second time alongside. Live workers beat again within
        the TTL of Redis answering again, and this process saw the stall: its
        own calls failed or waited, or went unanswered longer than a live
        worker's heartbeat could survive (`watched`).
        """
        return self._trouble_at is None or (
            time.monotonic() - self._trouble_at >= self.config.heartbeat_ttl_s)

    def reap_dead_workers(self):
        """Return the messages held by workers whose heartbeat expired to the
        head of their queues; returns how many. Safe to run anywhere, often
        (the engine's monitor and every CV worker do). Does nothing for a
        heartbeat TTL after Redis failed or stalled a call (`trusts_heartbeats`).
        """
        returned = 0
        members = self.watched(self._members, self.workers_key)
        if not self.trusts_heartbeats():
            return 0
        for worker_id in members:
            count = self._return_held(worker_id, only_if_dead=True)
            if count:
                logger.warning("returned %d CV job(s) held by dead worker %s", count, worker_id)
            returned += count
        return returned

    def queue_lengths(self, types=None):
        """{type: messages waiting} for `types`, or for every queue that exists."""
        if types is None:
            types = self._members(self.queues_key)
        pipe = self.client.pipeline(transaction=False)
        for job_type in types:
            pipe.llen(self.queue_key(job_type))
        return dict(zip(types, pipe.execute(), strict=True))

    def dead_letters(self, limit=100):
        """The newest dead letters first: {"raw", "bytes", "reason", "worker", "at"}."""
        return [_loads(item) for item in self.client.lrange(self.dead_key, 0, limit - 1)]

    # --- CV worker side -----------------------------------------------------

    def take(self, types, worker_id, wait_s):
        """Move the oldest message of one of `types` into the worker's
        processing list and return (type, raw), or None after about `wait_s`.

        A blocking move reads only one list, so with several types: one
        non-blocking LMOVE per queue (starting at a rotating one, for
        fairness), then a BLMOVE on the next queue in turn for a share of the
        slice. Every wait is shorter than the client's socket timeout, so a
        quiet queue never looks like a dead connection.
        """
        processing = self.processing_key(worker_id)
        slice_s = max(0.05, clients.block_slice_s(self.client) / len(types))
        deadline = time.monotonic() + wait_s
        while True:
            start = next(self._turn)
            order = [types[(start + i) % len(types)] for i in range(len(types))]
            if len(order) > 1:
                for job_type in order:
                    raw = self.client.lmove(self.queue_key(job_type), processing, "RIGHT", "LEFT")
                    if raw is not None:
                        return job_type, raw
            timeout_s = max(0.05, min(slice_s, deadline - time.monotonic()))
            raw = self._blocking_move(self.queue_key(order[0]), processing, timeout_s)
            if raw is not None:
                return order[0], raw
            if time.monotonic() >= deadline:
                return None

    def _blocking_move(self, source, destination, timeout_s):
        if clients.is_fake(self.client):
            # fakeredis's BLMOVE returns at once on an empty list instead of
            # blocking, which would spin; BRPOPLPUSH is the same move and blocks.
            return self.client.brpoplpush(source, destination, timeout_s)
        return self.client.blmove(source, destination, timeout_s, "RIGHT", "LEFT")

    def admit(self, message, taker):
        """Decide whether the taker runs the message it took (an Admission).

        `taker` is "<worker id>:<token unique to this delivery>". SET NX on
        the seen key is the guard against duplicate deliveries: exactly one
        taker of an attempt wins it; reading the key back in the same round
        trip makes an admission retried after a lost reply still see its own win.
        """
        seen = self.seen_key(message.job_id, message.attempt)
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.status_key(message.job_id))
        pipe.set(seen, taker, nx=True, ex=int(self.config.dedupe_ttl_s))
        pipe.get(seen)
        pipe.exists(self.cancel_key(message.job_id))
        raw_status, _, owner, cancelled = pipe.execute()
        won = _text(owner) == taker
        status = _loads(raw_status) or {}
        attempt = status.get("attempt")
        if isinstance(attempt, int) and attempt > message.attempt:
            return Admission.SUPERSEDED
        if attempt == message.attempt and status.get("state") in (State.DONE, State.FAILED):
            return Admission.FINISHED
        if not won:
            return Admission.DUPLICATE
        if cancelled:
            return Admission.CANCELLED
        return Admission.RUN

    def cancel_requested(self, job_id):
        return bool(self.client.exists(self.cancel_key(job_id)))

    def write_status(self, status, taker=None):
        """Write a job's status; returns whether it was written.

        With `taker` (the delivery that admitted the attempt), only while the
        attempt's seen key names it: a report of an attempt that was returned
        and taken by another worker is refused.
        """
        def write(pipe):
            pipe.set(self.status_key(status["job_id"]), json.dumps(status),
                     ex=int(self.config.status_ttl_s))

        return self._while_held(status["job_id"], status["attempt"], taker, write)

    def finish(self, message, worker_id, status=None, taker=None):
        """Drop the message from the worker's processing list, writing its final status with it.

        Returns False when the status was refused: with `taker`, it is written
        only while that delivery still holds the attempt (`write_status`). The
        message leaves the processing list either way: this worker is done with it.
        """
        processing = self.processing_key(worker_id)

        def write(pipe):
            if status is not None:
                pipe.set(self.status_key(message.job_id), json.dumps(status),
                         ex=int(self.config.status_ttl_s))
            pipe.lrem(processing, 1, message.raw)

        if self._while_held(message.job_id, message.attempt, taker, write):
            return True
        self.client.lrem(processing, 1, message.raw)
        return False

    def _while_held(self, job_id, attempt, taker, write):
        """Run `write(pipe)` in one MULTI if `taker` holds the attempt (always when
        `taker` is None); returns whether it ran.

        WATCH makes the check and the write one step: a reaper that returns
        the attempt in between, or a late delivery of the MULTI after it did
        (the EXEC of a connection the network held), aborts the write.
        """
        seen = self.seen_key(job_id, attempt)
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(5):
                try:
                    if taker is not None:
                        pipe.watch(seen)
                        if _text(pipe.get(seen)) != taker:
                            pipe.reset()
                            return False
                    pipe.multi()
                    write(pipe)
                    pipe.execute()
                    return True
                except WatchError:
                    continue  # the seen key changed: look at it again
        return False

    def dead_letter(self, raw, error, worker_id):
        """Move a poison message from the processing list to the dead letters.

        When its job id and attempt could be read, its status says failed
        ("rejected"), so the engine stops waiting for it.
        """
        text = _text(raw)
        record = {
            "raw": text if len(text) <= DEAD_RAW_CHARS else text[:DEAD_RAW_CHARS],
            "bytes": len(raw), "reason": error.reason, "worker": worker_id, "at": time.time(),
        }
        pipe = self.client.pipeline(transaction=True)
        pipe.lpush(self.dead_key, json.dumps(record))
        pipe.ltrim(self.dead_key, 0, DEAD_LETTERS_KEPT - 1)
        pipe.lrem(self.processing_key(worker_id), 1, raw)
        valid_id = isinstance(error.job_id, str) and NAME_RE.fullmatch(error.job_id)
        if valid_id and type(error.attempt) is int:
            status = new_status(error.job_id, error.attempt, State.FAILED, error=error.reason,
                                error_code="rejected", worker=worker_id)
            pipe.set(self.status_key(error.job_id), json.dumps(status), ex=int(self.config.status_ttl_s))
        pipe.execute()

    def hand_back(self, message, worker_id, status):
        """Return an admitted message this worker will not finish to the head
        of its queue, forgetting its seen key so the next taker runs it."""
        return self._move_back(message.type, message.raw, worker_id, status=status,
                               seen=self.seen_key(message.job_id, message.attempt))

    def put_back(self, job_type, raw, worker_id):
        """Return a message taken but not yet admitted (shutdown began meanwhile)."""
        return self._move_back(job_type, raw, worker_id)

    def _move_back(self, job_type, raw, worker_id, *, status=None, seen=None):
        processing = self.processing_key(worker_id)
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(20):
                try:
                    # WATCH: a reaper that thought this worker dead may be
                    # moving the same item; pushing it twice would queue it twice.
                    pipe.watch(processing, *([seen] if seen else []))
                    if pipe.lpos(processing, raw) is None:
                        pipe.reset()
                        return False
                    owner = _text(pipe.get(seen)) if seen else None
                    pipe.multi()
                    pipe.lrem(processing, 1, raw)
                    pipe.rpush(self.queue_key(job_type), raw)
                    if seen and _worker_of(owner) == worker_id:
                        pipe.delete(seen)
                    if status is not None:
                        pipe.set(self.status_key(status["job_id"]), json.dumps(status),
                                 ex=int(self.config.status_ttl_s))
                    pipe.execute()
                    return True
                except WatchError:
                    continue
        raise WatchError(f"could not move a {job_type} message back: the processing list kept changing")

    def held_by(self, worker_id):
        """The raw messages in a worker's processing list."""
        return self.client.lrange(self.processing_key(worker_id), 0, -1)

    def return_own(self, worker_id):
        """At start-up: return what a previous process with this worker id left behind."""
        return self._return_held(worker_id, only_if_dead=False)

    def beat(self, worker_id, info, job_ids=()):
        """Renew the worker's heartbeat and the TTL of its running jobs' status keys."""
        self.watched(self._beat, worker_id, info, job_ids)

    def _beat(self, worker_id, info, job_ids):
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.worker_key(worker_id), json.dumps(info), px=int(self.config.heartbeat_ttl_s * 1000))
        # Every beat, not once: a Redis that restarted empty must learn of it again.
        pipe.sadd(self.workers_key, worker_id)
        for job_id in job_ids:
            pipe.expire(self.status_key(job_id), int(self.config.status_ttl_s))
        pipe.execute()

    def remind(self, worker_id, running):
        """Register again what Redis forgot of the attempts this worker runs; returns the job ids.

        `running` holds (message, taker, status) per job. A Redis restarted
        without persistence has lost their seen keys, status keys and the
        processing list: the engine would then send each attempt again and a
        second worker would run it alongside. SET NX puts back only what is
        missing, so a normal beat changes nothing; the message goes back into
        the processing list only when its seen key was gone, so the reaper can
        return it if this worker dies later.
        """
        if not running:
            return []
        pipe = self.client.pipeline(transaction=False)
        for message, taker, status in running:
            pipe.set(self.seen_key(message.job_id, message.attempt), taker, nx=True,
                     ex=int(self.config.dedupe_ttl_s))
            pipe.set(self.status_key(message.job_id), json.dumps(status), nx=True,
                     ex=int(self.config.status_ttl_s))
        answers = pipe.execute()
        forgotten = [message for (message, _taker, _status), seen_set
                     in zip(running, answers[::2], strict=True) if seen_set]
        processing = self.processing_key(worker_id)
        for message in forgotten:
            if self.client.lpos(processing, message.raw) is None:
                self.client.lpush(processing, message.raw)
        return [message.job_id for message in forgotten]

    def drop_heartbeat(self, worker_id):
        self.client.delete(self.worker_key(worker_id))

    def _return_held(self, worker_id, *, only_if_dead):
        processing = self.processing_key(worker_id)
        heartbeat = self.worker_key(worker_id)
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(20):
                try:
                    # WATCH both: two reapers (the engine and a worker) may
                    # race for the same list, and a worker that beats again
                    # is alive after all. Either change aborts the EXEC.
                    pipe.watch(processing, heartbeat)
                    if only_if_dead and pipe.exists(heartbeat):
                        pipe.reset()
                        return 0
                    items = pipe.lrange(processing, 0, -1)
                    if not items:
                        # A worker gone for good: drop it from the registry.
                        pipe.multi()
                        pipe.srem(self.workers_key, worker_id)
                        pipe.execute()
                        return 0
                    messages = []
                    for raw in items:
                        try:
                            messages.append(parse_message(raw, max_bytes=self.config.max_message_bytes))
                        except PoisonMessage as exc:
                            messages.append(exc)
                    seen = [self.seen_key(m.job_id, m.attempt) for m in messages if isinstance(m, Message)]
                    owners = []
                    if seen:
                        pipe.watch(*seen)
                        owners = [_text(owner) for owner in pipe.mget(seen)]
                    pipe.multi()
                    # LRANGE lists newest first; RPUSH in that order leaves the
                    # oldest at the right end, to be taken first again.
                    for raw, message in zip(items, messages, strict=True):
                        if isinstance(message, Message):
                            pipe.rpush(self.queue_key(message.type), raw)
                        else:
                            record = {"raw": _text(raw)[:DEAD_RAW_CHARS], "bytes": len(raw),
                                      "reason": f"left by worker {worker_id}: {message.reason}",
                                      "worker": worker_id, "at": time.time()}
                            pipe.lpush(self.dead_key, json.dumps(record))
                    for key, owner in zip(seen, owners, strict=True):
                        # Only the dead worker's admission goes: the next taker must run it.
                        if _worker_of(owner) == worker_id:
                            pipe.delete(key)
                    pipe.delete(processing)
                    pipe.srem(self.workers_key, worker_id)
                    pipe.execute()
                    return len(items)
                except WatchError:
                    continue
        logger.warning("gave up returning the jobs of worker %s for now: its list kept changing", worker_id)
        return 0
