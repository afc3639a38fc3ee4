"""The engine stands alone: a project of Django's contrib apps and `jobs` runs its tasks.

tests/standalone/ holds that project (settings and two `@task`s). It gets a
database of its own, of the kind this pass runs on, and everything happens in
real `django-admin` processes: migrate, enqueue, `runworker --burst`, read.
"""

import ast
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


# Run by a plain interpreter, not `django-admin shell`, so that django-q2 can be made
# missing before Django starts (a None in sys.modules makes its import fail, as if it
# were not installed). Prints {"failed": {module: error}, "pages": {url: [status, expected]}}:
# 200, or 403 for the add form of a list that takes no additions.
IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
if sys.argv[1] == "without":
    sys.modules["django_q"] = None
import django
django.setup()
import jobs
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

failed = {}
for info in pkgutil.walk_packages(jobs.__path__, "jobs."):
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        failed[info.name] = str(exc)
staff = get_user_model().objects.create_superuser("root", "root@example.com", "x")
client = Client(SERVER_NAME="localhost")
client.force_login(staff)
request = client.get(reverse("admin:index")).wsgi_request
expected = {reverse("admin:index"): 200}
for model_admin in admin.site._registry.values():
    prefix = reverse("admin:%s_%s_changelist" % (model_admin.opts.app_label,
                                                 model_admin.opts.model_name))
    for pattern in model_admin.get_urls():
        route = str(pattern.pattern).lstrip("^").rstrip("$")
        if "<" not in route and "(?P" not in route:
            adds = route == "add/" and not model_admin.has_add_permission(request)
            expected[prefix + route] = 403 if adds else 200
pages = {url: [client.get(url).status_code, status] for url, status in sorted(expected.items())}
print(json.dumps({"failed": failed, "pages": pages}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("django_q", ["with", "without"])
def test_every_module_of_the_engine_and_its_admin_load_in_a_project_of_contrib_apps_and_jobs(
        database, django_q):
    """No module of jobs/ needs the site: each imports, and every admin page of the engine
    (its lists and its own views, the Schedules list when django-q2 is there) answers."""
    database = {**database, "STANDALONE_DJANGO_Q": "1" if django_q == "with" else "0"}
    django_admin(database, "migrate", "--no-input")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("JOBS_", "DATABASE_", "REDIS_"))}
    env.update(DJANGO_SETTINGS_MODULE="tests.standalone.settings", **database)
    done = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING, django_q], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])

    # Only the module that exists for django-q2's schedules may need it.
    expected = {} if django_q == "with" else {"jobs.admin.schedules"}
    assert set(found["failed"]) == set(expected), found["failed"]
    assert any("/jobs/job/" in url for url in found["pages"])
    assert any("/django_q/schedule/" in url for url in found["pages"]) == (django_q == "with")
    broken = {url: status for url, (status, expected) in found["pages"].items()
              if status != expected}
    assert not broken, broken


SITE = {"core", "project", "downloads", "insights", "subscriptions", "tests"}


@pytest.mark.dbless
def test_no_module_of_the_engine_imports_the_site():
    """The engine reads only django.conf.settings: no import of the project or its apps, at
    the top of a module or inside a function."""
    offenders = []
    for path in sorted((ROOT / "jobs").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                          for name in names if name.split(".")[0] in SITE]
    assert not offenders, offenders
