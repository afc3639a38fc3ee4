"""A project that installs Django's contrib apps and the engine, and nothing else of Haulage.

tests/integration/test_standalone.py migrates it, queues its two tasks and
runs them with `runworker --burst`: the engine needs no site app, no
django-q2 and no setting of its own (every knob has a default). With
STANDALONE_DJANGO_Q=1 it installs django-q2 too, as a project that wants
schedules would; urls.py beside this file serves the admin.
"""

import os

SECRET_KEY = "standalone-engine-test-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",  # the engine's admin pages load htmx with its template tag
    "jobs",
]
if os.environ.get("STANDALONE_DJANGO_Q") == "1":
    INSTALLED_APPS.append("django_q")
    Q_CLUSTER = {"name": "standalone", "orm": "default"}
ROOT_URLCONF = "tests.standalone.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
STATIC_URL = "static/"

# The test names the database: a fresh SQLite file, or a fresh PostgreSQL database.
DATABASES = {"default": {
    "ENGINE": os.environ["STANDALONE_DB_ENGINE"],
    "NAME": os.environ["STANDALONE_DB_NAME"],
    "HOST": os.environ.get("STANDALONE_DB_HOST", ""),
    "PORT": os.environ.get("STANDALONE_DB_PORT", ""),
    "USER": os.environ.get("STANDALONE_DB_USER", ""),
}}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # What the engine's check jobs.W002 asks of SQLite: writers queue for the lock.
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}

TASKS = {"default": {"BACKEND": "jobs.backend.HaulageBackend"}}
