"""Handles on the throw-away servers that tests/services.py started."""

import os
import subprocess

import pytest

REQUIRED = os.environ.get("REQUIRE_SERVICES") == "1"


def need(what, present):
    """Skip (or, with REQUIRE_SERVICES=1, fail) a test whose service is missing."""
    if present:
        return
    message = f"{what} is not available"
    if REQUIRED:
        pytest.fail(f"REQUIRE_SERVICES=1 but {message}", pytrace=False)
    pytest.skip(message)


class PostgresServer:
    """Stop and start the test PostgreSQL server, as the chaos tests need."""

    def __init__(self):
        self.bin = os.environ["TEST_PG_BIN"]
        self.data = os.environ["TEST_PG_DATA"]
        self.options = os.environ["TEST_PG_OPTIONS"]
        self.log = os.environ["TEST_PG_LOG"]
        user = os.environ.get("TEST_PG_USER")
        self.prefix = ["runuser", "-u", user, "--"] if user else []

    def pg_ctl(self, *args):
        subprocess.run(
            self.prefix + [f"{self.bin}/pg_ctl", "-D", self.data, *args],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def stop(self, mode="fast"):
        self.pg_ctl("-m", mode, "-w", "stop")

    def start(self):
        self.pg_ctl("-l", self.log, "-w", "-t", "30", "-o", self.options, "start")


def database_url(connection):
    """The URL of the database this test runs against (the test database), for subprocesses."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return f"postgres://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def pooled_url(connection):
    """The test database's URL through the test PgBouncer (transaction pooling), or None."""
    port = os.environ.get("TEST_PGBOUNCER_PORT")
    if port is None or connection.vendor != "postgresql":
        return None
    s = connection.settings_dict
    return f"postgres://{s['USER']}@127.0.0.1:{port}/{s['NAME']}"


def pgbouncer_admin(command):
    """Run `command` on the test PgBouncer's admin console; returns its rows as dicts."""
    import psycopg
    from psycopg.rows import dict_row

    port = os.environ["TEST_PGBOUNCER_PORT"]
    with psycopg.connect(f"postgres://postgres@127.0.0.1:{port}/pgbouncer", autocommit=True,
                         row_factory=dict_row) as conn:
        cursor = conn.execute(command)
        return cursor.fetchall() if cursor.description else []


def release_pooled(name):
    """Close PgBouncer's server connections to database `name`, so it can be dropped."""
    pgbouncer_admin(f"KILL {name}")
    pgbouncer_admin(f"RESUME {name}")
