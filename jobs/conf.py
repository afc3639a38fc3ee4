"""Every knob of the engine, with its default and unit, in one place.

Each is a Django setting of the same name, read through `conf.X`. The first
read is cached (enqueue and claim read several per job, and each read costs a
settings lookup and a check); a change of settings (`setting_changed`: tests,
override_settings) empties the cache, so nothing is copied for good. The
engine reads nothing else; a project that takes them from the environment
parses it in its settings module (Haulage's does, for every name here).
"""

import re
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.signals import setting_changed
from django.core.validators import validate_email
from django.dispatch import receiver
from django.utils.translation import gettext as _

DEFAULTS = {
    # Leases and heartbeats (seconds).
    "JOBS_LEASE_SECONDS": 30.0,  # how long a claim is valid without renewal
    "JOBS_HEARTBEAT_SECONDS": 10.0,  # how often a worker beats and renews its leases
    # A job whose lease its worker could not renew is stopped this long before the lease can
    # lapse, at most a fifth of the lease (jobs/runtime/fence.py).
    "JOBS_FENCE_SECONDS": 2.0,
    "JOBS_RESCUE_INTERVAL_SECONDS": 10.0,  # how often each worker looks for expired leases
    "JOBS_POLL_SECONDS": 2.0,  # idle wait between claims when no notification arrives
    "JOBS_WORKER_DEAD_AFTER_SECONDS": 60.0,  # heartbeat age after which a worker counts as dead
    # Retries.
    "JOBS_DEFAULT_MAX_ATTEMPTS": 3,
    "JOBS_BACKOFF_BASE_SECONDS": 5.0,  # first retry waits about this long, doubling each attempt
    "JOBS_BACKOFF_MAX_SECONDS": 3600.0,
    # Snoozes ("not now, come back in N s"; no attempt spent).
    "JOBS_MAX_SNOOZES": 20,  # per job; the next one fails it as snoozed_too_often
    "JOBS_SNOOZE_MAX_SECONDS": 86400.0,  # a longer snooze is cut to this
    # Shutdown.
    "JOBS_SHUTDOWN_GRACE_SECONDS": 30.0,  # first SIGTERM: let running jobs finish this long
    # Jobs of a kind no live worker serves fail after this long (rolling deploys).
    "JOBS_UNSERVED_KIND_FAIL_AFTER_SECONDS": 86400.0,
    # Each wait of an enqueue's statements for PostgreSQL's reply looks at the socket this
    # long before sleeping (jobs/engine/dbwait.py); the host's own queries never do. 0: off.
    "JOBS_DB_SPIN_MICROSECONDS": 200,
    # Payloads.
    "JOBS_MAX_PAYLOAD_BYTES": 1_000_000,
    "JOBS_MAX_PAYLOAD_DEPTH": 32,
    # Progress writes from handlers are throttled to one per this many seconds.
    "JOBS_PROGRESS_INTERVAL_SECONDS": 1.0,
    # Process-mode jobs (each kind may override these in its policy options).
    "JOBS_STALL_TIMEOUT_SECONDS": 60.0,  # no sign of life for this long = stalled
    "JOBS_WALL_CLOCK_CAP_SECONDS": 21600.0,  # an attempt never runs longer than this
    "JOBS_KILL_GRACE_SECONDS": 5.0,  # between TERM and KILL of the child's group
    "JOBS_SUPERVISOR_POLL_SECONDS": 0.25,  # how often the parent looks at its child
    # Local mode (no REDIS_URL): CV jobs run on threads inside each runworker.
    "JOBS_EMBEDDED_CV_CONCURRENCY": 1,
    # A runworker waits this long for migrations before giving up.
    "JOBS_MIGRATION_WAIT_SECONDS": 600.0,
    # The span the flow metrics (haulage_recent_*) describe.
    "JOBS_METRICS_WINDOW_SECONDS": 600.0,
    # Failure notices: at most one message per kind, error code and target this often.
    "JOBS_FAILURE_NOTIFY_WINDOW_SECONDS": 900.0,
    # A webhook has this long for the whole delivery: connecting, sending, its whole answer.
    "JOBS_FAILURE_WEBHOOK_TIMEOUT_SECONDS": 10.0,
    # The CV transport (Redis): heartbeats of CV workers, status and dedupe lifetimes.
    "CV_HEARTBEAT_TTL_S": 15.0,  # a CV worker silent this long has its jobs returned
    "CV_HEARTBEAT_INTERVAL_S": 5.0,
    "CV_STATUS_TTL_S": 3600.0,
    "CV_DEDUPE_TTL_S": 86400.0,  # how long a delivered attempt is remembered
    "CV_MAX_MESSAGE_BYTES": 262144,
    "CV_SHUTDOWN_GRACE_S": 30.0,  # a stopping CV worker lets running jobs finish this long
}

# Numbers that must stay above 0 (the rest may be 0): a zero here would
# make a loop spin or a key expire at once.
MINIMUMS = {"JOBS_METRICS_WINDOW_SECONDS": 1, "JOBS_FAILURE_WEBHOOK_TIMEOUT_SECONDS": 0.1, "CV_HEARTBEAT_TTL_S": 1, "CV_HEARTBEAT_INTERVAL_S": 0.1,
            "CV_STATUS_TTL_S": 60, "CV_DEDUPE_TTL_S": 60, "CV_MAX_MESSAGE_BYTES": 1024}

# Settings that are not numbers, with their defaults.
OTHER_DEFAULTS = {
    "JOBS_HANDLER_MODULES": [],  # modules that register kinds, besides each app's handlers/cvhandlers
    "JOBS_QUEUES": {},  # starting settings of queues: {"insights": {"concurrency": 1, ...}}
    "JOBS_PRUNE_AFTER": "30d",  # the default age of `prunejobs`
    "METRICS_TOKEN": "",  # when set, /metrics wants `Authorization: Bearer <it>`
    # E-mail addresses and/or http(s) webhook URLs told when a job fails for good.
    "JOBS_FAILURE_NOTIFY": [],
    "JOBS_SITE_URL": "",  # e.g. https://haulage.example.com: makes notices' admin links absolute
    # Webhooks reach public addresses only, and these `ip[/prefix][:port]` (jobs/egress.py).
    "JOBS_FAILURE_WEBHOOK_ALLOW": [],
    # "transaction": the default database is reached through a transaction
    # pooler (PgBouncer), so nothing may rely on a session through it.
    "JOBS_DATABASE_POOLER": "",
    # A DATABASES-style entry (HOST, PORT, USER, PASSWORD, optional NAME and
    # OPTIONS) for the workers' LISTEN connection, which needs a session of its
    # own: straight to PostgreSQL when the default database is pooled. None:
    # the default database's connection settings, or polling behind a pooler.
    "JOBS_LISTEN_DATABASE": None,
    "REDIS_URL": "",  # the CV transport's Redis; empty: the embedded local mode
    "CV_REDIS_PREFIX": "haulage",  # prefix of every Redis key
}


def __getattr__(name):
    if name in DEFAULTS:
        value = number(name)
    elif name in OTHER_DEFAULTS:
        value = getattr(settings, name, OTHER_DEFAULTS[name])
    else:
        raise AttributeError(name)
    # Kept as an attribute of this module: a later read is a plain attribute read,
    # not a call of this function (half a microsecond, three times in each enqueue:
    # docs/performance.md, twelfth round).
    globals()[name] = value
    return value


@receiver(setting_changed)
def _forget(**kwargs):
    for name in (*DEFAULTS, *OTHER_DEFAULTS):
        globals().pop(name, None)


def number(name):
    """The setting `name` as a number of its default's type, at least its minimum."""
    default = DEFAULTS[name]
    value = getattr(settings, name, default)
    minimum = MINIMUMS.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum \
            or value != value:  # NaN
        raise ImproperlyConfigured(
            f"{name} must be a number of at least {minimum}, not {value!r}.")
    return type(default)(value)


def handler_modules():
    """Modules that register kinds or CV handlers, besides each app's own (JOBS_HANDLER_MODULES)."""
    modules = getattr(settings, "JOBS_HANDLER_MODULES", [])
    if isinstance(modules, str):
        modules = modules.split(",")
    return [module.strip() for module in modules if module.strip()]


def queue_defaults():
    """Starting settings of queues, {name: {"concurrency": n, "gap_seconds": s}} (JOBS_QUEUES).

    They seed the Queue rows once; staff's later edits in the admin win.
    """
    return dict(getattr(settings, "JOBS_QUEUES", {}))


def prune_after():
    """JOBS_PRUNE_AFTER as a timedelta: finished jobs older than this go with `prunejobs`."""
    raw = getattr(settings, "JOBS_PRUNE_AFTER", OTHER_DEFAULTS["JOBS_PRUNE_AFTER"])
    try:
        return parse_age(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"JOBS_PRUNE_AFTER: {exc}") from None


def failure_targets():
    """JOBS_FAILURE_NOTIFY as (e-mail addresses, webhook URLs); ImproperlyConfigured names a bad entry.

    A list, or one string of entries separated by commas.
    """
    raw = getattr(settings, "JOBS_FAILURE_NOTIFY", [])
    entries = raw.split(",") if isinstance(raw, str) else list(raw)
    emails, urls = [], []
    for entry in (str(e).strip() for e in entries):
        if not entry:
            continue
        if "://" in entry:
            parts = urlsplit(entry)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ImproperlyConfigured(
                    f"JOBS_FAILURE_NOTIFY: {entry!r} is not an http(s) URL with a host.")
            urls.append(entry)
        else:
            try:
                validate_email(entry)
            except ValidationError:
                raise ImproperlyConfigured(
                    f"JOBS_FAILURE_NOTIFY: {entry!r} is neither an e-mail address nor an "
                    "http(s) URL.") from None
            emails.append(entry)
    return emails, urls


def webhook_policy():
    """Where failure webhooks may connect (JOBS_FAILURE_WEBHOOK_ALLOW); ImproperlyConfigured
    names a bad entry."""
    from jobs.egress import Policy

    try:
        return Policy.parse(getattr(settings, "JOBS_FAILURE_WEBHOOK_ALLOW", []))
    except ValueError as exc:
        raise ImproperlyConfigured(f"JOBS_FAILURE_WEBHOOK_ALLOW: {exc}") from None


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text):
    """A duration like "30d", "12h", "90m", "45s" or "2w" as a timedelta; ValueError otherwise."""
    match = _AGE.match(str(text))
    if not match:
        raise ValueError(
            _("%(value)r is not an age; write a number and a unit: 90m, 12h, 30d (s, m, h, d, w).")
            % {"value": text}
        )
    return timedelta(seconds=float(match[1]) * _UNIT_S[match[2].lower()])
