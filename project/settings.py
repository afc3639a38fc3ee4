"""Haulage settings: configuration only, every value from the environment.

docs/settings.md documents each variable; `jobs/conf.py` (and each
app's `conf.py`) holds the queue's own knobs with their defaults and units.
"""

from pathlib import Path

from django.utils.translation import gettext_lazy as _

from jobs import conf as jobs_conf
from project import env

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env.get_str("HAULAGE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env.get_bool("DEBUG", False)

# A key that is public (in this file) or missing must never sign production
# cookies: with DEBUG off it stops start-up instead.
INSECURE_DEV_KEY = "insecure-dev-key-only-for-debug"
SECRET_KEY = env.get_str("SECRET_KEY") or (INSECURE_DEV_KEY if DEBUG else "")
if not DEBUG and SECRET_KEY in ("", INSECURE_DEV_KEY):
    raise env.SettingsError(
        "SECRET_KEY must be set to a long random value when DEBUG is off "
        "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))')."
    )

ALLOWED_HOSTS = env.get_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.get_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "core",  # before staticfiles: its runserver guards the development static handler
    "django.contrib.staticfiles",
    "django_htmx",
    "django_q",
    "jobs",
    "downloads",
    "insights",
    "subscriptions",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.middleware.RefuseMalformedMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "core.tokens.BearerTokenMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.middleware.LoginRequiredMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
# Default: an SQLite file under var/. WAL lets readers work beside the one
# writer, IMMEDIATE makes every transaction take the write lock up front (so
# two worker processes queue for it instead of deadlocking on an upgrade), and
# the timeout makes them wait for it instead of failing with "locked".
DATABASES = {"default": env.get_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'haulage.sqlite3'}")}
# "transaction" when DATABASE_URL points at PgBouncer in transaction pooling mode.
DATABASE_POOLER = env.get_choice("DATABASE_POOLER", ["", "session", "transaction"])
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;",
    }
    # SQLite connections are cheap, and the health check is pointless for a file.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Tests use a file too, so worker subprocesses can share the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    # An unreachable server is an error within seconds, not a hang.
    _options.setdefault("connect_timeout", env.get_number("DATABASE_CONNECT_TIMEOUT", 3, int, minimum=1))
    # A process frozen inside a transaction (SIGSTOP, a VM pause, a partition)
    # would keep its row locks, and with them every job of its concurrency
    # keys, until it woke. PostgreSQL ends such a session after half a lease,
    # so the recovery bound (lease + rescue interval + poll) holds.
    # Behind a transaction pooler that guard is the pooler's own
    # (docs/operations.md, "Behind PgBouncer"): PgBouncer refuses startup
    # options, and a session setting would not follow a client from one
    # server connection to the next.
    _idle_ms = int(env.get_number("JOBS_LEASE_SECONDS", jobs_conf.DEFAULTS["JOBS_LEASE_SECONDS"],
                                  minimum=1) * 500)
    if DATABASE_POOLER != "transaction" and \
            "idle_in_transaction_session_timeout" not in _options.get("options", ""):
        _options["options"] = (
            _options.get("options", "") + f" -c idle_in_transaction_session_timeout={_idle_ms}"
        ).strip()
    if DATABASE_POOLER == "transaction":
        # Nothing may outlive a transaction: a server-side cursor (`.iterator()`
        # holds one open across transactions) or a prepared statement would be
        # looked for on a server connection another client has by then.
        DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
        _options["prepare_threshold"] = None
    else:
        # The engine's statements (jobs/engine/queries.py) are prepared after their
        # fifth run on a connection; Django's own queries are never prepared.
        _options.setdefault("prepare_threshold", 5)
# LISTEN holds a session, so behind a transaction pooler workers listen over a
# direct connection to the same server (the database name defaults to
# DATABASE_URL's); without one they poll every JOBS_POLL_SECONDS.
JOBS_DATABASE_POOLER = DATABASE_POOLER
JOBS_LISTEN_DATABASE = (env.get_database("JOBS_LISTEN_DATABASE_URL", "")
                        if env.get_str("JOBS_LISTEN_DATABASE_URL").strip() else None)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- The queue -----------------------------------------------------------
# jobs/conf.py names every knob of the engine with its default and unit. The
# engine reads Django settings only; here each one set in the environment
# becomes the setting of the same name.
globals().update(env.get_numbers(jobs_conf.DEFAULTS, jobs_conf.MINIMUMS))
JOBS_HANDLER_MODULES = env.get_list("JOBS_HANDLER_MODULES")
JOBS_PRUNE_AFTER = env.get_str("JOBS_PRUNE_AFTER", jobs_conf.OTHER_DEFAULTS["JOBS_PRUNE_AFTER"])
METRICS_TOKEN = env.get_str("METRICS_TOKEN").strip()
CV_REDIS_PREFIX = env.get_str("CV_REDIS_PREFIX", jobs_conf.OTHER_DEFAULTS["CV_REDIS_PREFIX"])
# Told when a job fails for good (jobs/notices.py): e-mail addresses and/or
# http(s) webhook URLs, separated by commas; admin links start with JOBS_SITE_URL.
JOBS_FAILURE_NOTIFY = env.get_list("JOBS_FAILURE_NOTIFY")
JOBS_SITE_URL = env.get_str("JOBS_SITE_URL").strip().rstrip("/")
# Webhooks reach public addresses only, and these `ip[/prefix][:port]` entries.
JOBS_FAILURE_WEBHOOK_ALLOW = env.get_list("JOBS_FAILURE_WEBHOOK_ALLOW")

# Django's @task functions run on Haulage's engine (jobs/backend.py).
TASKS = {
    "default": {
        "BACKEND": "jobs.backend.HaulageBackend",
        "QUEUES": env.get_list("JOBS_TASK_QUEUES", ["default"]),
    }
}

# Starting settings of queues; staff edit them live afterwards (the Queue rows).
JOBS_QUEUES = {
    # One AI generation at a time across the deployment, resting a gap after each.
    "insights": {
        "concurrency": env.get_number("INSIGHTS_CONCURRENCY", 1, int, minimum=1),
        "gap_seconds": env.get_number("INSIGHTS_GAP_SECONDS", 20.0, minimum=0),
    },
    # The embedded local generator's insights (no gateway configured): no limit, no gap.
    "insights-local": {},
    # CV jobs sent to the fleet at once. A CV worker takes what was sent first in, first out,
    # so what waits past the fleet's capacity waits here, in priority order: a shot a user
    # clicked is measured next, not behind every analysis already sent.
    "cv": {"concurrency": env.get_number("CV_IN_FLIGHT", 2, int, minimum=1)},
}

# --- Schedules (django-q2) -----------------------------------------------------
# django-q2 only fires schedules: each scheduled function is short and enqueues
# Haulage jobs, so the heavy work keeps the engine's guarantees. Its ORM broker
# needs no extra server; `runworker` supervises one cluster per machine (or run
# `manage.py qcluster` apart). Every cluster may look for due schedules: a
# schedule's row is locked while it fires, so it fires once per period.
_SCHEDULE_TIMEOUT_S = env.get_number("SCHEDULER_TASK_TIMEOUT_SECONDS", 300, int, minimum=10)
Q_CLUSTER = {
    "name": "haulage",
    "orm": "default",
    "workers": 1,
    "recycle": 100,
    "timeout": _SCHEDULE_TIMEOUT_S,
    "retry": _SCHEDULE_TIMEOUT_S + 60,  # never hand a firing to a second worker while it runs
    "max_attempts": 1,  # a failed firing is recorded; the next period fires again
    "ack_failures": True,
    "save_limit": env.get_number("SCHEDULER_SAVE_LIMIT", 200, int, minimum=0),
    "catch_up": False,  # after downtime, fire once, not once per missed period
    "poll": 1,
    # How often the cluster checks its processes; it looks for due schedules
    # every max(30 s, this) (django-q2's cadence), the first time after as long.
    "guard_cycle": env.get_number("SCHEDULER_GUARD_CYCLE_SECONDS", 0.5, minimum=0.1),
    "label": _("Schedules"),
}

# --- Mail (failure notices, password resets) -------------------------------------
# EMAIL_BACKEND: smtp (the default), console, file (under EMAIL_FILE_PATH), locmem,
# dummy, or a backend's dotted path; each gets the options it takes.
MAILERS = {"default": env.get_mailer("EMAIL_BACKEND", file_path=VAR_DIR / "mail")}
DEFAULT_FROM_EMAIL = env.get_str("DEFAULT_FROM_EMAIL", "haulage@localhost")

# --- Redis (unset = embedded local mode) ----------------------------------
REDIS_URL = env.get_redis_url("REDIS_URL")

# --- Accounts -------------------------------------------------------------
# Failed logins per account and per client address, password resets per e-mail
# and per address: past the limit within the window, refused (core/throttle.py).
LOGIN_THROTTLE_LIMIT = env.get_number("LOGIN_THROTTLE_LIMIT", 10, int, minimum=1)
LOGIN_THROTTLE_WINDOW_SECONDS = env.get_number("LOGIN_THROTTLE_WINDOW_SECONDS", 60.0, minimum=1)
PASSWORD_RESET_THROTTLE_LIMIT = env.get_number("PASSWORD_RESET_THROTTLE_LIMIT", 5, int, minimum=1)
PASSWORD_RESET_THROTTLE_WINDOW_SECONDS = env.get_number("PASSWORD_RESET_THROTTLE_WINDOW_SECONDS",
                                                        3600.0, minimum=1)
CSRF_FAILURE_VIEW = "core.views.csrf_failure"  # JSON for the API
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Languages ------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("zh-hans", _("Simplified Chinese"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
TIME_ZONE = env.get_str("TIME_ZONE", "UTC")
USE_TZ = True

# --- Files ----------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = Path(env.get_str("STATIC_ROOT", str(VAR_DIR / "static")))
MEDIA_URL = "media/"
MEDIA_ROOT = Path(env.get_str("MEDIA_ROOT", str(VAR_DIR / "media")))
# The sample video `make run` serves beside the site (scripts/run-site sets it): the home page
# offers it to a newcomer while downloads may reach it.
HAULAGE_SAMPLE_URL = env.get_str("HAULAGE_SAMPLE_URL").strip()

# --- Security (production) ------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the cookie-less meta tag; harmless either way
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
# Only a proxy in front may say a request came over HTTPS (X-Forwarded-Proto) and from
# whom (the last X-Forwarded-For address): without one, any client could say so.
BEHIND_PROXY = env.get_bool("BEHIND_PROXY", False)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if not DEBUG:
    SECURE_SSL_REDIRECT = env.get_bool("SECURE_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.get_number("SECURE_HSTS_SECONDS", 31536000, int, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

LOG_LEVEL = env.get_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "level": LOG_LEVEL}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Django's own default would let its INFO lines (one per task started and
    # finished) through whatever LOG_LEVEL says.
    "loggers": {"django": {"level": LOG_LEVEL}, "django.db.backends": {"level": "INFO"}},
}
STATICFILES_DIRS = [BASE_DIR / "static"]
