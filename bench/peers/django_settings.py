"""Minimal Django settings for the Django-based peers (django-q2, django-tasks-db).

Only what they need to run, at their defaults except where the peer's own
`settings` line says otherwise. The database comes from the environment.
"""

import os

import dj_database_url

SECRET_KEY = "bench-peers-only-not-a-secret"  # a throw-away local benchmark
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_q", "django_tasks_db"]
# Persistent connections as in production (the harness's --conn-max-age,
# 60 s by default); Django's default of 0 makes both peers reconnect per job.
DATABASES = {
    "default": dj_database_url.parse(
        os.environ["BENCH_PEERS_DATABASE_URL"],
        conn_max_age=int(os.environ.get("BENCH_PEERS_CONN_MAX_AGE", "60")),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-tasks-db: its backend as the default, all of its options at their defaults.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

# django-q2 with the ORM broker on the same PostgreSQL. One worker per cluster
# process (the harness starts one or two qclusters); retry must exceed timeout
# or django-q2 warns. Everything else (poll 0.2 s, bulk 1, save_limit 250) is
# its default.
Q_CLUSTER = {"name": "bench", "orm": "default", "workers": 1, "timeout": 60, "retry": 120}
