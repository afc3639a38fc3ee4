"""Haulage's engine: a job queue for long, heavy jobs, installed as a Django app.

    import jobs

    @jobs.kind("reports.build", label="Report", queue="reports", max_attempts=3)
    def build(ctx, payload):
        ctx.progress(0.5, message="Half way")
        ...

    jobs.enqueue("reports.build", {"report": 7}, owner=request.user)

These names are the engine's public surface; what lives in its modules beside
them is its own business. Each is imported on first use, so a settings module
may import `jobs.conf` before Django has loaded the apps.
"""

from importlib import import_module

_PUBLIC = {
    # Declaring kinds: the decorator, the context a handler gets, schedule functions.
    "kind": "jobs.engine.registry",
    "JobContext": "jobs.runtime.context",
    "schedulable": "jobs.schedules",
    # Queueing and steering jobs (one function per verb, each a guarded transition).
    "enqueue": "jobs.services",
    "enqueue_many": "jobs.services",
    "cancel": "jobs.services",
    "cancel_matching": "jobs.services",
    "pause": "jobs.services",
    "resume": "jobs.services",
    "retry": "jobs.services",
    "retry_matching": "jobs.services",
    "move_to_front": "jobs.services",
    "move_up": "jobs.services",
    "move_down": "jobs.services",
    "set_limit": "jobs.services",
    "set_rate": "jobs.services",
    "set_queue": "jobs.services",
    # Per-user caps, decided here, refused by the app in its own words.
    "owner_at_cap": "jobs.engine.limits",
    # What a handler raises, and what the engine raises at its callers.
    "Fail": "jobs.exceptions",
    "Retry": "jobs.exceptions",
    "Snooze": "jobs.exceptions",
    "JobError": "jobs.exceptions",
    "IllegalTransition": "jobs.exceptions",
    "LeaseLost": "jobs.exceptions",
    "TransportUnavailable": "jobs.exceptions",
    # The queue's rows and their states.
    "Job": "jobs.models",
    "JobStatus": "jobs.models",
    "Outcome": "jobs.models",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'jobs' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later reads find it without this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
