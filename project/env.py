"""Reading settings from the environment, with errors a person can act on.

Every value Haulage reads from the environment goes through these helpers so
that a malformed one stops start-up with one sentence naming the variable,
instead of a traceback from deep inside a library.
"""

import os
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


class SettingsError(ImproperlyConfigured):
    """An environment variable is missing or malformed; the message says which and how to fix it."""


TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def setting(name, default, read):
    """A Django setting of that name when one is set; otherwise `read(name, default)` from the
    environment (e.g. `get_str`). An app's knobs read this way can be set either place."""
    from django.conf import settings

    try:
        value = getattr(settings, name, None)
    except ImproperlyConfigured:
        value = None  # a bare child process without Django settings reads the environment alone
    return value if value is not None else read(name, default)


def get_str(name, default=""):
    return os.environ.get(name, default)


def get_bool(name, default=False):
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise SettingsError(f"{name} must be true or false (1/0, yes/no, on/off), not {raw!r}.")


def get_number(name, default, kind=float, minimum=None):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise SettingsError(f"{name} must be {noun}, not {raw!r}.") from None
    if minimum is not None and value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, not {raw!r}.")
    return value


def get_numbers(defaults, minimums=None):
    """{name: number} for each of `defaults` set in the environment, as the default's type.

    For an app's numeric knobs declared with their defaults in one table (jobs/conf.py):
    the ones the environment sets become settings of the same name.
    """
    minimums = minimums or {}
    return {name: get_number(name, default, type(default), minimum=minimums.get(name, 0))
            for name, default in defaults.items() if name in os.environ}


def get_choice(name, choices):
    """One of `choices` (lower-cased; the first is the default)."""
    raw = os.environ.get(name, "").strip().lower()
    if raw not in choices:
        words = ", ".join(repr(choice) for choice in choices if choice)
        raise SettingsError(f"{name} must be one of {words} (or unset), not {raw!r}.")
    return raw or choices[0]


def get_list(name, default=()):
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def get_database(name, default):
    """Parse a database URL with dj-database-url, naming the variable when it is malformed."""
    import dj_database_url

    raw = os.environ.get(name) or default
    try:
        config = dj_database_url.parse(raw, conn_max_age=600, conn_health_checks=True)
    except (ValueError, KeyError) as exc:
        raise SettingsError(
            f"{name} is not a database URL Haulage understands ({exc}); "
            "use postgres://user:password@host:5432/name or sqlite:///path/to/file.sqlite3."
        ) from None
    if config.get("ENGINE") not in {
        "django.db.backends.postgresql",
        "django.db.backends.sqlite3",
    }:
        raise SettingsError(f"{name} must point at PostgreSQL or SQLite, not {config.get('ENGINE')}.")
    return config


def get_redis_url(name):
    """A Redis URL, or "" for the embedded local mode."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    parts = urlsplit(raw)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    else:
        valid = parts.scheme in {"redis", "rediss"} and bool(parts.hostname) or (
            parts.scheme == "unix" and bool(parts.path)
        )
    if not valid:
        raise SettingsError(
            f"{name} is not a Redis URL ({raw!r}); use redis://host:6379/0, "
            "or leave it unset for the embedded local mode."
        )
    return raw


# EMAIL_BACKEND's short names for Django's own backends.
MAIL_BACKENDS = {
    "smtp": "django.core.mail.backends.smtp.EmailBackend",
    "console": "django.core.mail.backends.console.EmailBackend",
    "file": "django.core.mail.backends.filebased.EmailBackend",
    "locmem": "django.core.mail.backends.locmem.EmailBackend",
    "dummy": "django.core.mail.backends.dummy.EmailBackend",
}


def get_mailer(name, *, file_path):
    """A MAILERS entry: `name` holds a short name of MAIL_BACKENDS (smtp when unset) or a
    backend's dotted path. Each backend gets only the options it takes (Django refuses
    others): SMTP the EMAIL_HOST... settings, the file backend EMAIL_FILE_PATH (default
    `file_path`), the rest none."""
    raw = os.environ.get(name, "").strip() or "smtp"
    backend = MAIL_BACKENDS.get(raw.lower(), raw)
    if "." not in backend:
        raise SettingsError(f"{name} must be one of {', '.join(MAIL_BACKENDS)} or a backend's "
                            f"dotted path (e.g. django.core.mail.backends.smtp.EmailBackend), "
                            f"not {raw!r}.")
    if backend == MAIL_BACKENDS["smtp"]:
        options = {
            "host": get_str("EMAIL_HOST", "localhost"),
            "port": get_number("EMAIL_PORT", 25, int, minimum=1),
            "username": get_str("EMAIL_HOST_USER"),
            "password": get_str("EMAIL_HOST_PASSWORD"),
            "use_tls": get_bool("EMAIL_USE_TLS", False),
            "timeout": get_number("EMAIL_TIMEOUT", 10, int, minimum=1),  # a dead server fails the try
        }
    elif backend == MAIL_BACKENDS["file"]:
        options = {"file_path": get_str("EMAIL_FILE_PATH", str(file_path))}
    else:
        options = {}
    return {"BACKEND": backend, "OPTIONS": options}
