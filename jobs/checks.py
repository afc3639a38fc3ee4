"""System checks for the engine's settings (jobs/conf.py), run by `check` and every command.

A bad value is said once, at start-up, with the setting's name, instead of
failing the first claim or prune that reads it.
"""

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from jobs import conf


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
