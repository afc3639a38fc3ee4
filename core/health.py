"""Liveness and readiness probes for load balancers and orchestrators."""

import time

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET


# Exempt from CSRF, which only guards writes: a POST then gets require_GET's 405.
@csrf_exempt
@login_not_required
@require_GET
@never_cache
def healthz(request):
    """The process is alive; no I/O, so a slow database never restarts a healthy web process."""
    return JsonResponse({"status": "ok"})


def check_database():
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except DatabaseError as exc:
        # The next request must not inherit a broken connection.
        connection.close_if_unusable_or_obsolete()
        return f"database unreachable: {exc.__class__.__name__}"


_migrations_ok_at = 0.0


def check_migrations():
    global _migrations_ok_at
    # Building the migration graph costs tens of milliseconds; once applied,
    # trust it for a minute (a rollback on a live site is rare and deliberate).
    if time.monotonic() - _migrations_ok_at < 60:
        return None
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return f"database unreachable: {exc.__class__.__name__}"
    if pending:
        return f"{len(pending)} migration(s) not applied"
    _migrations_ok_at = time.monotonic()
    return None


def check_redis():
    from jobs.cv.clients import ping

    return ping()


@csrf_exempt
@login_not_required
@require_GET
@never_cache
def readyz(request):
    """200 only when this process can serve: database up, migrations applied, Redis (if used) up."""
    checks = {"database": check_database()}
    if checks["database"] is None:
        checks["migrations"] = check_migrations()
    checks["redis"] = check_redis()
    failed = {name: problem for name, problem in checks.items() if problem}
    body = {
        "status": "unavailable" if failed else "ok",
        "checks": {name: problem or "ok" for name, problem in checks.items()},
        # Reported, not required: pages work while CV jobs wait for a worker.
        "cv_workers": cv_workers() if checks["redis"] is None else None,
    }
    return JsonResponse(body, status=503 if failed else 200)


def cv_workers():
    """How many CV workers have a live heartbeat; "embedded" in local mode.

    In local mode each runworker runs its own CV worker on an in-process
    Redis this web process cannot see.
    """
    import redis

    from jobs.cv import clients
    from jobs.cv.transport import Transport

    if clients.is_local_mode():
        return "embedded"
    try:
        return len(Transport(clients.get_client()).live_workers())
    except redis.RedisError:
        return None
