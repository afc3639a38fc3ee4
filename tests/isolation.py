"""Give each pytest-xdist worker a machine of its own: folder, database, Redis.

Loaded with `-p tests.isolation` (pyproject's addopts), so this module runs
before pytest-django imports the settings: what it sets in the environment
reaches the settings and every subprocess a test starts (runworker, the CV
worker, the scheduler). pytest-django itself gives each worker its own test
database (a `_gw<N>` suffix on PostgreSQL's name and on SQLite's file).

- `HAULAGE_VAR_DIR` gains the worker's name, so default `MEDIA_ROOT`s, SQLite
  files and CV result files (named by job id, which every worker's database
  starts at 1) never meet.
- `TEST_REDIS_URL` points at a database number of the worker's own:
  `TEST_REDIS_DB_BASE` (set per pass by tests/runner.py) plus the worker's
  index, so a test that flushes or counts keys sees only its own.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES_PER_PASS = 8  # a default Redis has 16: two passes of 8 workers


def _worker_index(worker):
    return int(worker.removeprefix("gw"))


def _isolate(worker):
    var_dir = os.environ.get("HAULAGE_VAR_DIR")
    if var_dir:
        own = Path(var_dir, worker)
        own.mkdir(parents=True, exist_ok=True)
        os.environ["HAULAGE_VAR_DIR"] = str(own)
    url = os.environ.get("TEST_REDIS_URL")
    if url:
        base = int(os.environ.get("TEST_REDIS_DB_BASE", "0"))
        number = base + _worker_index(worker) % REDIS_DATABASES_PER_PASS
        os.environ["TEST_REDIS_URL"] = urlunsplit(urlsplit(url)._replace(path=f"/{number}"))


def _pass_redis_database():
    """Outside xdist (the serial phase) a pass still keeps to its own Redis database."""
    url = os.environ.get("TEST_REDIS_URL")
    base = os.environ.get("TEST_REDIS_DB_BASE")
    if url and base:
        os.environ["TEST_REDIS_URL"] = urlunsplit(urlsplit(url)._replace(path=f"/{int(base)}"))


if os.environ.get("PYTEST_XDIST_WORKER"):
    _isolate(os.environ["PYTEST_XDIST_WORKER"])
else:
    _pass_redis_database()
