"""Kinds: a name, a handler and the policy the engine applies to its jobs.

Apps declare their kinds with the decorator; the engine does the rest:

    @jobs.engine.registry.kind("downloads.fetch", label=_("Download"), queue="downloads",
                        max_attempts=3, mode="process", concurrency_keys=lambda p, owner: [...])
    def fetch(ctx, payload):
        ...
"""

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobs import bounds, conf
from jobs.exceptions import UnknownKind

MODES = ("inline", "process", "redis")


@dataclass(frozen=True)
class Policy:
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None  # None: JOBS_DEFAULT_MAX_ATTEMPTS
    backoff_base_s: float | None = None  # None: JOBS_BACKOFF_BASE_SECONDS
    backoff_max_s: float | None = None
    # Wall-clock cap of one attempt, in seconds, or a function of the payload.
    timeout_s: float | Callable[[dict], float | None] | None = None
    mode: str = "inline"
    # Computed at enqueue from (payload, owner); each may be None.
    unique_key: Callable[[dict, Any], str | None] | None = None
    concurrency_keys: Callable[[dict, Any], list[str]] | None = None
    fingerprint: Callable[[dict, Any], str] | None = None
    # Limit used for a concurrency key that has no ConcurrencyLimit row yet.
    default_limits: dict[str, int] = field(default_factory=dict)
    # At most N starts per period ("10/m", "3/10s"; or a function returning
    # one, read at enqueue) for the jobs sharing a rate key: by default the
    # kind's name, else `rate_key(payload, owner)` (None or "": no limit).
    # The rate gives a key its RateLimit row once; staff edit it live there.
    rate_limit: str | Callable[[], str | None] | None = None
    rate_key: Callable[[dict, Any], str | None] | None = None
    # Kinds whose every new job gets one of this kind as a dependent, with
    # the parent's payload under "of" (jobs/engine/dependencies.py).
    follows: tuple[str, ...] = ()
    # A FAILED job asked for again (enqueued with its key) this long after it
    # gave up is re-armed, attempts reset; before that the request returns it.
    # Nothing re-arms a job nobody asks for.
    cooldown_s: float | None = None
    # Options for the process / redis modes: stall_timeout_s, wall_clock_cap_s,
    # kill_grace_s, poll_interval_s, limits={address_space_bytes, data_bytes, file_size_bytes, cpu_time_s}.
    options: dict = field(default_factory=dict)
    # `finished(job)`: inside the transaction that gives a job its final state
    # (SUCCESSFUL, FAILED, CANCELLED), write the app's own copy of that state,
    # so it commits with the job's or not at all.
    finished: Callable | None = None
    # `cleanup(job, outcome=, final=)`: let go of what an attempt held outside
    # the queue once it ended (jobs/engine/outcome.py says when); `final` when the job
    # will not run again. A pause keeps what a resume needs.
    cleanup: Callable | None = None
    # Redis mode: turns the CV worker's result document into the job's result
    # (and the app's rows), inside the transaction that completes the job.
    ingest: Callable | None = None

    def attempts_allowed(self):
        return self.max_attempts if self.max_attempts is not None else conf.JOBS_DEFAULT_MAX_ATTEMPTS

    def backoff_s(self, attempt):
        """Exponential backoff with full jitter, so a failing dependency is not hit in lockstep."""
        base = self.backoff_base_s if self.backoff_base_s is not None else conf.JOBS_BACKOFF_BASE_SECONDS
        cap = self.backoff_max_s if self.backoff_max_s is not None else conf.JOBS_BACKOFF_MAX_SECONDS
        ceiling = min(cap, base * 2 ** max(0, attempt - 1))
        return random.uniform(ceiling / 2, ceiling)

    def timeout_for(self, payload):
        return self.timeout_s(payload) if callable(self.timeout_s) else self.timeout_s

    def rate(self):
        """The kind's rate limit ("10/m"), or None."""
        return self.rate_limit() if callable(self.rate_limit) else self.rate_limit

    def limit_for(self, key):
        """The default limit of a key, by its namespace ("user:42" -> default_limits["user"])."""
        return self.default_limits.get(key.split(":", 1)[0], self.default_limits.get("*", 1))


@dataclass(frozen=True)
class Kind:
    name: str
    handler: Callable
    policy: Policy
    label: Any = None  # what people call its jobs (a lazy translation); None: the name




_kinds: dict[str, Kind] = {}


def kind(name, *, label=None, **policy):
    """Register the decorated function as the handler of jobs of kind `name`, called `label`
    on pages."""
    if policy.get("mode", "inline") not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if isinstance(policy.get("rate_limit"), str):
        bounds.parse_rate(policy["rate_limit"])  # a typo fails at start-up, not at the first enqueue
    policy["follows"] = tuple(policy.get("follows", ()))

    def register(handler):
        _kinds[name] = Kind(name=name, handler=handler, policy=Policy(**policy), label=label)
        _followers.clear()
        return handler

    return register


def register(name, handler, **policy):
    """Register without a decorator (used by the Django Tasks backend)."""
    kind(name, **policy)(handler)
    return _kinds[name]


def get(name):
    try:
        return _kinds[name]
    except KeyError:
        raise UnknownKind(f"No job kind named {name!r} is registered.") from None


def policy(name):
    """The kind's policy; the defaults for a kind this process does not know (a row from another
    deploy), so recording the end of such a job never fails for want of one."""
    spec = _kinds.get(name)
    return spec.policy if spec is not None else Policy()


def label(name):
    """The human, translated name of a kind's jobs ("Download"); the kind itself when it has none
    (or is not registered in this process)."""
    spec = _kinds.get(name)
    return str(spec.label) if spec is not None and spec.label is not None else name


def names():
    return sorted(_kinds)


def queues():
    """Every queue a registered kind, a Haulage Tasks backend or JOBS_QUEUES names, "default"
    first. A kind may enqueue some of its jobs on a queue other than its policy's (declared
    in JOBS_QUEUES), so workers serve that one too by default."""
    from django.conf import settings

    names = {spec.policy.queue for spec in _kinds.values()} | {"default"}
    names.update(conf.queue_defaults())
    for backend in getattr(settings, "TASKS", {}).values():
        if backend.get("BACKEND") == "jobs.backend.HaulageBackend":
            names.update(backend.get("QUEUES", []))
    return sorted(names, key=lambda name: (name != "default", name))


_followers: dict[str, tuple[str, ...]] = {}


def followers(name):
    """The kinds that declared they follow kind `name` (computed once per registration)."""
    if not _followers and _kinds:
        for spec in _kinds.values():
            for followed in spec.policy.follows:
                _followers[followed] = (*_followers.get(followed, ()), spec.name)
        _followers[""] = ()  # computed, even when nothing follows anything
    return _followers.get(name, ())


def unregister(name):
    """For tests that register throw-away kinds."""
    _kinds.pop(name, None)
    _followers.clear()
