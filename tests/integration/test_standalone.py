"""The engine stands alone: a project of Django's contrib apps and `jobs` runs its tasks.

tests/standalone/ holds that project (settings and two `@task`s). It gets a
database of its own, of the kind this pass runs on, and everything happens in
real `django-admin` processes: migrate, enqueue, `runworker --burst`, read.
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def django_admin(database, *args, timeout=120):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("JOBS_", "DATABASE_", "REDIS_"))}
    env.update(DJANGO_SETTINGS_MODULE="tests.standalone.settings", **database)
    done = subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"django-admin {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def maintenance(statement, settings):
    """Run CREATE/DROP DATABASE on this pass's PostgreSQL server (outside any transaction)."""
    import psycopg

    with psycopg.connect(host=settings["HOST"], port=settings["PORT"], user=settings["USER"],
                         password=settings["PASSWORD"], dbname="postgres", autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture
def database(tmp_path):
    """A fresh, empty database for the standalone project, of the kind this pass runs on."""
    if connection.vendor != "postgresql":
        yield {"STANDALONE_DB_ENGINE": "django.db.backends.sqlite3",
               "STANDALONE_DB_NAME": str(tmp_path / "standalone.sqlite3")}
        return
    settings = connection.settings_dict
    name = f"standalone_{uuid.uuid4().hex[:12]}"
    maintenance(f'CREATE DATABASE "{name}"', settings)
    yield {"STANDALONE_DB_ENGINE": "django.db.backends.postgresql", "STANDALONE_DB_NAME": name,
           "STANDALONE_DB_HOST": settings["HOST"], "STANDALONE_DB_PORT": str(settings["PORT"]),
           "STANDALONE_DB_USER": settings["USER"]}
    maintenance(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', settings)


@pytest.mark.slow
def test_a_project_of_contrib_apps_and_jobs_migrates_and_runs_its_tasks(database):
    django_admin(database, "check", "--fail-level", "WARNING")
    django_admin(database, "migrate", "--no-input")
    ids = json.loads(django_admin(database, "shell", "-c", (
        "import json; from tests.standalone.tasks import add, shout; "
        "print(json.dumps([add.enqueue(2, 3).id, shout.enqueue('hello').id]))")).splitlines()[-1])

    django_admin(database, "runworker", "--burst", "--concurrency", "2")

    results = json.loads(django_admin(database, "shell", "-c", (
        "import json; from tests.standalone.tasks import add, shout; "
        f"a, s = add.get_result({ids[0]!r}), shout.get_result({ids[1]!r}); "
        "print(json.dumps([a.status, a.return_value, s.status, s.return_value]))")).splitlines()[-1])
    assert results == ["SUCCESSFUL", 5, "SUCCESSFUL", {"word": "HELLO", "attempt": 1}]
