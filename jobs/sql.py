"""The few expressions PostgreSQL and SQLite spell differently, named once."""

import json

from django.db import connection


def is_postgres():
    return connection.vendor == "postgresql"


def now():
    """The database clock, as Django's Now() writes it (SQLite's CURRENT_TIMESTAMP has whole seconds)."""
    return "STATEMENT_TIMESTAMP()" if is_postgres() else "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')"


def mark_running(ids, *, worker, token, lease_s):
    """The claim's final step: the chosen jobs RUNNING under one new lease, by id."""
    from jobs.models import Job

    token = Job._meta.get_field("lease_token").get_db_prep_value(token, connection)
    marks = ", ".join(["%s"] * len(ids))
    if is_postgres():
        expires = f"{now()} + %s * interval '1 second'"
        append = "worker_ids || %s::jsonb"
        params = [worker.pk, token, lease_s, json.dumps([worker.name]), *ids]
    else:
        expires = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %s)"
        append = "json_insert(worker_ids, '$[#]', %s)"
        params = [worker.pk, token, f"+{lease_s} seconds", worker.name, *ids]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE jobs_job SET status = 'RUNNING', worker_id = %s, lease_token = %s, "
            f"lease_expires_at = {expires}, attempts = attempts + 1, started_at = {now()}, "
            f"updated_at = {now()}, stop_requested = '', blocked_key = NULL, "
            f"worker_ids = {append} WHERE id IN ({marks})",
            params,
        )


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


def complete_batch(rows):
    """Mark RUNNING jobs SUCCESSFUL in one statement; `rows` are (id, lease token, result).

    Each row is guarded by its own token; returns the ids that matched (a job
    whose lease was lost meanwhile is left alone).
    """
    from jobs.models import Job

    token_field = Job._meta.get_field("lease_token")
    params, values = [], []
    jsonb = "::jsonb" if is_postgres() else ""
    uuid_cast = "::uuid" if is_postgres() else ""
    for job_id, token, result in rows:
        values.append("(%s, %s, %s)")
        params += [job_id, token_field.get_db_prep_value(token, connection),
                   None if result is None else json.dumps(result)]
    statement = (
        f"WITH v(id, token, result) AS (VALUES {', '.join(values)}) "
        "UPDATE jobs_job SET status = 'SUCCESSFUL', "
        f"result = (SELECT v.result{jsonb} FROM v WHERE v.id = jobs_job.id), "
        f"progress = 1.0, finished_at = {now()}, updated_at = {now()}, "
        "error = '', error_code = '', worker_id = NULL, lease_token = NULL, "
        "lease_expires_at = NULL, blocked_key = NULL, stop_requested = '' "
        f"WHERE status = 'RUNNING' AND EXISTS (SELECT 1 FROM v WHERE v.id = jobs_job.id "
        f"AND v.token{uuid_cast} = jobs_job.lease_token) "
        "RETURNING id"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [row[0] for row in cursor.fetchall()]
