"""The few expressions PostgreSQL and SQLite spell differently, named once."""

import json

from django.db import connection
from django.db.models.expressions import RawSQL


def is_postgres():
    return connection.vendor == "postgresql"


def json_append(column, value):
    """`column` (a JSON list) with `value` appended, computed by the database."""
    if is_postgres():
        return RawSQL(f"{column} || %s::jsonb", [json.dumps([value])])
    return RawSQL(f"json_insert({column}, '$[#]', %s)", [value])


def has_key_condition(column="concurrency_keys"):
    """A WHERE fragment true when the JSON list `column` contains the parameter."""
    if is_postgres():
        return f"{column} @> jsonb_build_array(%s::text)"
    return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value = %s)"


def running_counts(keys):
    """{key: number of RUNNING jobs carrying it} for the given keys."""
    if not keys:
        return {}
    keys = sorted(set(keys))
    if is_postgres():
        sql = (
            "SELECT k, count(*) FROM jobs_job j, jsonb_array_elements_text(j.concurrency_keys) k "
            "WHERE j.status = 'RUNNING' AND k = ANY(%s) GROUP BY k"
        )
        params = [keys]
    else:
        marks = ",".join(["%s"] * len(keys))
        sql = (
            "SELECT k.value, count(*) FROM jobs_job j, json_each(j.concurrency_keys) k "
            f"WHERE j.status = 'RUNNING' AND k.value IN ({marks}) GROUP BY k.value"
        )
        params = keys
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def lock_limits(keys):
    """Lock the limit rows of `keys` (sorted, so two lockers never deadlock) and return {key: limit}.

    Holding these row locks until commit is what makes a per-key limit
    airtight: a second claimer of the same key waits here, then counts the
    first one's committed claim. SQLite has no row locks; its IMMEDIATE
    transaction already serialises every writer.
    """
    if not keys:
        return {}
    keys = sorted(set(keys))
    marks = ",".join(["%s"] * len(keys))
    lock = " FOR UPDATE" if is_postgres() else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT key, "limit" FROM jobs_concurrencylimit WHERE key IN ({marks}) ORDER BY key{lock}',
            keys,
        )
        return dict(cursor.fetchall())
