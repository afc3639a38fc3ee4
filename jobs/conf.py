"""Every knob of the engine, with its default and unit, in one place.

Each is a Django setting of the same name, which an environment variable of
the same name overrides (so `JOBS_LEASE_SECONDS=3 manage.py runworker` works
without a settings file). Read them through `conf.X` at call time, never copy
them at import: tests and staff change them while processes run.
"""

from django.conf import settings

from project import env

DEFAULTS = {
    # Leases and heartbeats (seconds).
    "JOBS_LEASE_SECONDS": 30.0,  # how long a claim is valid without renewal
    "JOBS_HEARTBEAT_SECONDS": 10.0,  # how often a worker beats and renews its leases
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
    # Payloads.
    "JOBS_MAX_PAYLOAD_BYTES": 1_000_000,
    "JOBS_MAX_PAYLOAD_DEPTH": 32,
    # Progress writes from handlers are throttled to one per this many seconds.
    "JOBS_PROGRESS_INTERVAL_SECONDS": 1.0,
    # Process-mode jobs (each kind may override these in its policy options).
    "JOBS_STALL_TIMEOUT_SECONDS": 60.0,  # no liveness beat for this long = stalled
    "JOBS_WALL_CLOCK_CAP_SECONDS": 21600.0,  # an attempt never runs longer than this
    "JOBS_KILL_GRACE_SECONDS": 5.0,  # between TERM and KILL of the child's group
    "JOBS_SUPERVISOR_POLL_SECONDS": 0.25,  # how often the parent looks at its child
    # Local mode (no REDIS_URL): CV jobs run on threads inside each runworker.
    "JOBS_EMBEDDED_CV_CONCURRENCY": 1,
    # A runworker waits this long for migrations before giving up.
    "JOBS_MIGRATION_WAIT_SECONDS": 600.0,
}

INT_SETTINGS = {"JOBS_DEFAULT_MAX_ATTEMPTS", "JOBS_MAX_SNOOZES", "JOBS_MAX_PAYLOAD_BYTES", "JOBS_MAX_PAYLOAD_DEPTH",
                "JOBS_EMBEDDED_CV_CONCURRENCY"}


def __getattr__(name):
    if name not in DEFAULTS:
        raise AttributeError(name)
    default = getattr(settings, name, DEFAULTS[name])
    kind = int if name in INT_SETTINGS else float
    return env.get_number(name, default, kind, minimum=0)


def handler_modules():
    """Extra modules that register kinds (JOBS_HANDLER_MODULES, comma-separated)."""
    configured = getattr(settings, "JOBS_HANDLER_MODULES", [])
    return env.get_list("JOBS_HANDLER_MODULES", configured)


def queue_defaults():
    """Starting settings of queues, {name: {"concurrency": n, "gap_seconds": s}} (JOBS_QUEUES).

    They seed the Queue rows once; staff's later edits in the admin win.
    """
    return dict(getattr(settings, "JOBS_QUEUES", {}))
