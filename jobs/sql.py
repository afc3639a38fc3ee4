"""The few expressions PostgreSQL and SQLite spell differently, named once."""

import json

from django.db import connection

from jobs import bounds


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
            # The right-hand started_at is the previous attempt's: a row attempted
            # before first_started_at existed keeps the earliest start it knows.
            f"first_started_at = COALESCE(first_started_at, started_at, {now()}), "
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
            # The type test first: one hand-edited row that is no array would make
            # the function fail every claim.
            "SELECT k, count(*) FROM jobs_job j, jsonb_array_elements_text("
            "CASE WHEN jsonb_typeof(j.concurrency_keys) = 'array' THEN j.concurrency_keys "
            "ELSE '[]'::jsonb END) k "
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
        # A row edited by hand may hold anything: read it as the nearest sane limit.
        return {key: bounds.sane(limit, low=0, high=bounds.LIMIT_MAX, default=1,
                                 what=f"the limit of key {key!r}")
                for key, limit in cursor.fetchall()}


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


# Bulk enqueue writes these columns; the rest take a new job's constant values.
BULK_COLUMNS = ("public_id", "kind", "queue", "payload", "priority", "owner_id", "fingerprint",
                "concurrency_keys", "blocked_key", "max_attempts", "run_after", "enqueued_at")
BULK_CONSTANTS = {
    "status": "'READY'", "position": "0", "unique_key": "NULL", "stop_requested": "''",
    "attempts": "0", "snoozes": "0", "worker_ids": "'[]'", "phase": "''", "progress_message": "''",
    "error": "''", "error_code": "''", "errors": "'[]'",
}


def insert_many(jobs):
    """INSERT resolved jobs (see services._resolve): one statement per 5,000 on PostgreSQL.

    PostgreSQL gets the batch as one JSON document (encoded and parsed in C on
    both sides, unlike one array parameter per column); SQLite gets executemany.
    """
    import uuid

    stamps = {}  # jobs of one call share a few timestamps: format each once

    def stamp(moment):
        text = stamps.get(moment)
        if text is None:
            text = stamps[moment] = moment.isoformat()
        return text

    columns = ", ".join(BULK_COLUMNS + tuple(BULK_CONSTANTS))
    constants = ", ".join(BULK_CONSTANTS.values())
    with connection.cursor() as cursor:
        if is_postgres():
            names = ", ".join(BULK_COLUMNS)
            record = ", ".join(f"{name} {BULK_TYPES[name]}" for name in BULK_COLUMNS)
            for start in range(0, len(jobs), 5000):
                document = json.dumps([
                    {"public_id": str(uuid.uuid4()), "kind": job.kind, "queue": job.queue,
                     "payload": job.payload, "priority": job.priority,
                     "owner_id": job.owner.pk if job.owner is not None else None,
                     "fingerprint": job.fingerprint, "concurrency_keys": job.concurrency_keys,
                     "blocked_key": job.blocked_key, "max_attempts": job.max_attempts,
                     "run_after": stamp(job.run_after), "enqueued_at": stamp(job.enqueued_at)}
                    for job in jobs[start:start + 5000]
                ])
                cursor.execute(
                    f"INSERT INTO jobs_job ({columns}, updated_at) SELECT {names}, {constants}, "
                    f"enqueued_at FROM json_to_recordset(%s::json) AS u({record})",
                    [document],
                )
        else:
            marks = ", ".join(["%s"] * len(BULK_COLUMNS))
            adapt = connection.ops.adapt_datetimefield_value
            cursor.executemany(
                f"INSERT INTO jobs_job ({columns}, updated_at) VALUES ({marks}, {constants}, %s)",
                [(uuid.uuid4().hex, job.kind, job.queue, job.payload_text, job.priority,
                  job.owner.pk if job.owner is not None else None, job.fingerprint,
                  json.dumps(job.concurrency_keys), job.blocked_key, job.max_attempts,
                  adapt(job.run_after), adapt(job.enqueued_at), adapt(job.enqueued_at))
                 for job in jobs],
            )


BULK_TYPES = {
    "public_id": "uuid", "kind": "text", "queue": "text", "payload": "jsonb", "priority": "int",
    "owner_id": "int", "fingerprint": "text", "concurrency_keys": "jsonb", "blocked_key": "text",
    "max_attempts": "int", "run_after": "timestamptz", "enqueued_at": "timestamptz",
}
