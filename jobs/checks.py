"""System checks for the engine's settings (jobs/conf.py), run by `check` and every command.

A bad value is said once, at start-up, with the setting's name, instead of
failing the first claim or prune that reads it.
"""

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from jobs import conf
from jobs.runtime import fence


@checks.register()
def check_settings(app_configs=None, **kwargs):
    errors = []
    for name in conf.DEFAULTS:
        try:
            conf.number(name)
        except ImproperlyConfigured as exc:
            errors.append(checks.Error(str(exc), id="jobs.E001"))
    try:
        conf.prune_after()
    except ImproperlyConfigured as exc:
        errors.append(checks.Error(str(exc), id="jobs.E002"))
    try:
        conf.failure_targets()
    except ImproperlyConfigured as exc:
        errors.append(checks.Error(str(exc), id="jobs.E004"))
    try:
        conf.webhook_policy()
    except ImproperlyConfigured as exc:
        errors.append(checks.Error(str(exc), id="jobs.E007"))
    if errors:
        return errors  # the comparisons below read those numbers
    from jobs.cv.transport import CVConfig

    try:
        CVConfig.from_settings()
    except ImproperlyConfigured as exc:
        errors.append(checks.Error(str(exc), id="jobs.E003"))
    if conf.JOBS_HEARTBEAT_SECONDS >= conf.JOBS_LEASE_SECONDS:
        errors.append(checks.Warning(
            "JOBS_HEARTBEAT_SECONDS is not shorter than JOBS_LEASE_SECONDS: leases would run out "
            "between renewals and live jobs would be rescued.", id="jobs.W001"))
    elif conf.JOBS_HEARTBEAT_SECONDS >= conf.JOBS_LEASE_SECONDS - fence.margin_s():
        errors.append(checks.Warning(
            "JOBS_HEARTBEAT_SECONDS leaves no room before the fence (JOBS_FENCE_SECONDS, at most "
            "a fifth of JOBS_LEASE_SECONDS): a worker would stop its jobs between two renewals. "
            "Beat more often or lengthen the lease.", id="jobs.W005"))
    return errors


@checks.register()
def check_sqlite(app_configs=None, **kwargs):
    """SQLite serves several worker threads and processes only when writers queue for its lock."""
    settings = connections["default"].settings_dict
    if not settings["ENGINE"].endswith("sqlite3"):
        return []
    options = settings.get("OPTIONS", {})
    if options.get("transaction_mode") == "IMMEDIATE" and options.get("timeout", 5) >= 5:
        return []
    return [checks.Warning(
        "SQLite without OPTIONS {'transaction_mode': 'IMMEDIATE', 'timeout': 30}: claims and "
        "completions from several threads or workers fail with 'database is locked' and are "
        "retried instead of waiting their turn.", id="jobs.W002")]


@checks.register()
def check_pooler(app_configs=None, **kwargs):
    """Behind a transaction pooler, nothing may outlive a transaction (JOBS_DATABASE_POOLER)."""
    pooler = conf.JOBS_DATABASE_POOLER
    if pooler not in ("", "session", "transaction"):
        return [checks.Error(f"JOBS_DATABASE_POOLER must be '', 'session' or 'transaction', "
                             f"not {pooler!r}.", id="jobs.E005")]
    settings = connections["default"].settings_dict
    if pooler != "transaction" or not settings["ENGINE"].endswith("postgresql"):
        return []
    found = []
    if not settings.get("DISABLE_SERVER_SIDE_CURSORS"):
        found.append(checks.Warning(
            "The database is behind a transaction pooler but DISABLE_SERVER_SIDE_CURSORS is not "
            "set: QuerySet.iterator() would open a cursor on a server connection that serves "
            "another client after the transaction.", id="jobs.W003"))
    if "prepare_threshold" not in settings.get("OPTIONS", {}):
        found.append(checks.Warning(
            "The database is behind a transaction pooler: set OPTIONS {'prepare_threshold': None} "
            "so psycopg never prepares a statement on a server connection it does not keep.",
            id="jobs.W004"))
    return found


@checks.register()
def check_admin_needs(app_configs=None, **kwargs):
    """The engine's admin pages load htmx through django-htmx's template tag."""
    from django.apps import apps

    if not apps.is_installed("django.contrib.admin") or apps.is_installed("django_htmx"):
        return []
    return [checks.Error(
        "The jobs admin pages need django-htmx: add \"django_htmx\" to INSTALLED_APPS.",
        id="jobs.E006")]
