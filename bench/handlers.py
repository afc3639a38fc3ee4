"""The no-op kind the engine benchmarks run (loaded with JOBS_HANDLER_MODULES=bench.handlers)."""

from django.tasks import task

from jobs.engine.registry import kind


@kind("bench.noop", max_attempts=1, concurrency_keys=lambda payload, owner: payload.get("keys", []),
      default_limits={"user": 1000, "hol": 1})
def noop(ctx, payload):
    return None


# bench/rates.py: starts across two workers against a rate of 20 per 10 s.
@kind("bench.rated", max_attempts=1, rate_limit="20/10s")
def rated(ctx, payload):
    return None


@task
def noop_task():
    """A no-op Django task, as the peers' bench enqueues through the Tasks API."""
    return None
