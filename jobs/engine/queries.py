"""Every raw SQL statement of the engine, each under a name with a one-line description.

The ORM writes the rest. These are raw because the ORM cannot say them (an
upsert against a partial unique index, LATERAL, a VALUES list joined to an
UPDATE, JSON array membership) or because they run thousands of times a
second and their compile step would cost more than the query. PostgreSQL and
SQLite spell a few things differently; each function hides that once.
"""

import json
import uuid
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.postgresql.base import ServerBindingCursor
from django.db.models import Min
from django.db.models.functions import Now
from django.utils import timezone
from psycopg.errors import FeatureNotSupported

from jobs import bounds
from jobs.engine import order
from jobs.models import (
    CLAIMABLE,
    DURATION_COLUMNS,
    LIVE_STATUSES,
    FailureNotice,
    Job,
    JobEvent,
    JobRollup,
    QueueSample,
)


def is_postgres():
    return connection.vendor == "postgresql"


_SQLITE_NOW = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')"
# SQLite's clock counts milliseconds while Python writes times to the
# microsecond, and the text "…:54.123456" sorts after "…:54.123": a job
# enqueued in the clock's current millisecond would not be due yet. Asking
# whether a time has come, the clock stands for the end of its millisecond:
# times are seen up to 1 ms early, never late.
_SQLITE_COME = f"({_SQLITE_NOW} || '999')"


def now(*, come=False):
    """The database clock, as Django's Now() writes it (SQLite's CURRENT_TIMESTAMP has whole seconds).

    `come=True` for comparing a time with it: has the time come?
    """
    if is_postgres():
        return "STATEMENT_TIMESTAMP()"
    return _SQLITE_COME if come else _SQLITE_NOW


# jobs/models.py's CLAIMABLE in SQL: every statement below that reads the
# claimable set says it with this, the predicate of the partial indexes the
# statement walks (tests/integration/test_claimable.py holds the two to one set).
CLAIMABLE_SQL = "status = 'READY' AND blocked_key IS NULL"


class Come(Now):
    """The ORM's Now() for asking whether a time has come (`run_after__lte=Come()`)."""

    def as_sqlite(self, compiler, connection, **extra_context):
        # Func.as_sql %-formats the template once more: double the escapes.
        return self.as_sql(compiler, connection, template=_SQLITE_COME.replace("%", "%%"),
                           **extra_context)


def _cursor():
    """Django's cursor for the engine's statements, with the parameters bound by PostgreSQL.

    So psycopg prepares each statement once it has run `prepare_threshold`
    times on a connection: parsing and planning the enqueue's INSERT again was a
    third of its time (docs/performance.md). Django's own queries keep its
    client-side binding: with server-side binding, one expression's parameter
    in SELECT and in GROUP BY are two parameters, which PostgreSQL refuses.
    Behind a transaction pooler nothing is prepared (settings: prepare_threshold).

    Built as Django's `cursor()` builds one (health check, connection, the thread
    and debug wrapping), less the client-binding cursor it would make only for this
    one to replace (docs/performance.md, sixth round).
    """
    if not is_postgres():
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    return connection._prepare_cursor(_PreparingCursor(connection.connection))


@contextmanager
def _stale_plans_dropped():
    """Once a migration changes the type of a column a prepared statement returns,
    PostgreSQL refuses that statement on this connection for good ("cached plan must not
    change result type"). The statement that meets it fails; the connection is dropped
    (inside a transaction, when it ends), so the next one prepares afresh."""
    try:
        yield
    except FeatureNotSupported:
        connection.close()
        raise


class _PreparingCursor(ServerBindingCursor):
    # A statement's error is raised by execute(), or in pipeline mode where
    # `together()` ends: those two places drop a stale plan's connection.
    def execute(self, *args, **kwargs):
        with _stale_plans_dropped():
            return super().execute(*args, **kwargs)


def _execute(statement, params=(), db=None):
    """Run one statement and return its rows (None for a statement that returns none).

    `db`: the default connection, when the caller has it already (each read of
    it through the proxy costs a lookup in asgiref's thread-local storage).
    """
    db = db or connections[DEFAULT_DB_ALIAS]
    kept = _kept_cursor(db)
    if kept is None:
        with _cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else None
    # What Django's cursor wrapper does around execute(), less its layers.
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        kept.execute(statement, params)
        # Not `description`: it builds a Column, type name and all, for every field.
        return kept.fetchall() if kept.pgresult.nfields else None


def _kept_cursor(db):
    """The engine's own cursor on `db`'s connection, made once per connection, or None
    where a statement must go through Django's cursor.

    Making a psycopg cursor, with Django's wrapper around it, and closing it cost
    a tenth of an enqueue (docs/performance.md, ninth round). Prepared statements
    belong to the connection, not the cursor: a kept cursor runs them as a fresh
    one would. Whatever watches the queries (DEBUG's log, `assertNumQueries`, an
    `execute_wrapper`) sees them through Django's cursor instead, as do statements
    queued in `together()`'s pipeline, each holding its rows on a cursor of its
    own until the block ends.
    """
    if db.vendor != "postgresql" or db.queries_logged or db.execute_wrappers:
        return None
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    if raw.pgconn.pipeline_status:
        return None
    kept = getattr(db, "haulage_cursor", None)
    if kept is None or kept.connection is not raw:  # Django connected again since
        kept = db.haulage_cursor = _PreparingCursor(raw)
    return kept


# --- Statements sent together --------------------------------------------------


@contextmanager
def together():
    """Statements sent as `Pending` inside this block reach PostgreSQL in one round trip
    (psycopg's pipeline mode); their rows are read after it. Each statement still runs in turn
    on a snapshot of its own, so one sent after a lock sees what the lock's last
    holder committed. A no-op on SQLite, whose statements cost no round trip.

    An error of a statement sent here may be raised where the block ends, by psycopg:
    it becomes Django's error there, as it would have in `execute()`.
    """
    if not is_postgres():
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, _stale_plans_dropped(), connection.connection.pipeline():
        yield


class Pending:
    """A statement sent (inside `together()`, perhaps), its rows read with `rows()`:
    after the block on PostgreSQL, at once on SQLite."""

    def __init__(self, statement, params=(), convert=None):
        self._convert = convert
        self._rows = None
        self._cursor = _cursor()
        self._cursor.execute(statement, params)
        if not is_postgres():
            self.rows()

    def rows(self):
        if self._rows is None:
            rows = self._cursor.fetchall()
            self._cursor.close()
            self._rows = [self._convert(*row) for row in rows] if self._convert else rows
        return self._rows


# --- Enqueue -------------------------------------------------------------------


REPLACEABLE = ("payload", "run_after")  # what enqueue(replace=...) may change of a READY job


# A new job has no asked payload: its column's NULL is left to the INSERT.
_INSERTED_FIELDS = [f for f in Job._meta.concrete_fields
                    if not f.primary_key and f.attname != "asked_payload"]


def _row(job):
    """(quoted columns, database values) of an unsaved job: every column but the id (and the
    asked payload, NULL), as save() would."""
    db = connections[DEFAULT_DB_ALIAS]  # once, not through the proxy for each of ~35 fields
    columns = ", ".join(db.ops.quote_name(f.column) for f in _INSERTED_FIELDS)
    return columns, [f.get_db_prep_save(f.pre_save(job, True), db) for f in _INSERTED_FIELDS]


def insert_job(job, *, notify_channel):
    """INSERT one new job without a unique key and return its id; on PostgreSQL the same
    statement sends NOTIFY `notify_channel` with its queue (delivered at commit).

    One round trip instead of save() and a NOTIFY after it, and the columns of
    a new job as bulk enqueue writes them (no model field is prepared). PostgreSQL
    folds identical notifications of one transaction into one, so a transaction
    that enqueues many jobs still wakes each queue's workers once.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "postgresql":
        [(job_id, _)] = _execute(_INSERT_NOTIFYING, [*_new_values(job, ops=db.ops), notify_channel],
                                 db=db)
    else:
        [(job_id,)] = _execute(_INSERT, _new_values(job, ops=db.ops), db=db)
    return job_id


def insert_or_promote(job, replace=()):
    """INSERT the job, or update the live job holding its unique key; returns (id, inserted).

    The partial unique index arbitrates between two enqueuers racing on one
    key: exactly one row is inserted and the other caller gets that row. The
    live job is promoted (never demoted); new data (another fingerprint) for a
    job not yet running makes it take that fingerprint, and a READY one start
    its attempts again (they were spent on the old data). A RUNNING job keeps
    its own (its attempt read the old data) and notes the new one as asked for
    (`asked_fingerprint`, the latest request's; cleared by a request for its own
    data): when it leaves RUNNING it runs again for that data (transitions). SET
    reads the row as it was, so every CASE sees the old fingerprint.

    `replace` (some of REPLACEABLE) makes a READY job take the new payload or
    run_after in the same statement: a burst of enqueues debounces into one
    run, with the last one's data. A RUNNING job asked to replace its payload
    notes it (`asked_payload`, the latest request's), even the payload it has:
    its attempt may have read the data before the caller changed it. It runs
    once more with it when it ends (transitions), however many asked meanwhile.
    A new run_after alone asks nothing of a RUNNING job: it is dropped, as
    the attempt it would delay has started.
    """
    columns, values = _row(job)
    marks = ", ".join(["%s"] * len(values))
    live = ", ".join(f"'{s}'" for s in LIVE_STATUSES)
    new_data = ("excluded.fingerprint <> '' AND excluded.fingerprint <> jobs_job.fingerprint "
                "AND jobs_job.status <> 'RUNNING'")
    [(job_id, public_id)] = _execute(
        f"INSERT INTO jobs_job ({columns}) VALUES ({marks}) "
        f"ON CONFLICT (unique_key) WHERE status IN ({live}) DO UPDATE SET "
        "priority = CASE WHEN excluded.priority > jobs_job.priority "
        "THEN excluded.priority ELSE jobs_job.priority END, "
        f"attempts = CASE WHEN {new_data} AND jobs_job.status = 'READY' "
        "THEN 0 ELSE jobs_job.attempts END, "
        f"fingerprint = CASE WHEN {new_data} THEN excluded.fingerprint "
        "ELSE jobs_job.fingerprint END, "
        "asked_fingerprint = CASE WHEN jobs_job.status = 'RUNNING' AND excluded.fingerprint <> '' "
        "THEN CASE WHEN excluded.fingerprint <> jobs_job.fingerprint THEN excluded.fingerprint "
        "ELSE '' END ELSE jobs_job.asked_fingerprint END"
        + "".join(f", {column} = CASE WHEN jobs_job.status = 'READY' THEN excluded.{column} "
                  f"ELSE jobs_job.{column} END" for column in REPLACEABLE if column in replace)
        + (", asked_payload = CASE WHEN jobs_job.status = 'RUNNING' THEN excluded.payload "
           "ELSE jobs_job.asked_payload END" if "payload" in replace else "")
        + " RETURNING id, public_id",
        values,
    )
    return job_id, str(public_id).replace("-", "") == job.public_id.hex


def _literal(value):
    """SQL text of one of the constants below."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("'", "''") + "'"


# A new job's row: these columns hold the job's own values; the rest hold the
# constants (as values for COPY, as SQL text for the INSERTs).
BULK_COLUMNS = ("public_id", "kind", "queue", "payload", "priority", "owner_id", "fingerprint",
                "concurrency_keys", "rate_key", "blocked_key", "on_dependency_failure",
                "max_attempts", "run_after", "enqueued_at")
NEW_ROW = {
    "status": "READY", "position": 0, "unique_key": None, "stop_requested": "",
    "has_dependents": False, "attempts": 0, "snoozes": 0, "worker_ids": "[]", "phase": "",
    "progress_message": "", "error": "", "error_code": "", "errors": "[]",
}
BULK_CONSTANTS = {name: _literal(value) for name, value in NEW_ROW.items()}
BULK_TYPES = {
    "public_id": "uuid", "kind": "text", "queue": "text", "payload": "jsonb", "priority": "int",
    "owner_id": "int", "fingerprint": "text", "concurrency_keys": "jsonb", "rate_key": "text",
    "blocked_key": "text", "on_dependency_failure": "text",
    "max_attempts": "int", "run_after": "timestamptz", "enqueued_at": "timestamptz",
}


# One new job's INSERT (insert_job), its text made once.
_INSERT_INTO = f"INSERT INTO jobs_job ({', '.join(BULK_COLUMNS + tuple(BULK_CONSTANTS))}, updated_at)"
# Its NOTIFY in RETURNING, not in a SELECT over a CTE of the INSERT: the same
# notification, without a second plan node to feed.
_INSERT_NOTIFYING = (
    f"{_INSERT_INTO} VALUES ("
    f"{', '.join(f'%s::{BULK_TYPES[name]}' for name in BULK_COLUMNS)}, "
    f"{', '.join(BULK_CONSTANTS.values())}, %s) RETURNING id, pg_notify(%s, queue)")
_INSERT = (f"{_INSERT_INTO} VALUES ({', '.join(['%s'] * len(BULK_COLUMNS))}, "
           f"{', '.join(BULK_CONSTANTS.values())}, %s) RETURNING id")


def insert_many(jobs):
    """Write resolved jobs (see enqueue.resolve): COPY on PostgreSQL, executemany on SQLite.

    COPY streams the rows with no statement to parse or plan per row and no
    expression to evaluate: half the time of the one INSERT ... SELECT FROM
    json_to_recordset it replaced (docs/performance.md, seventh round).
    """
    columns = ", ".join(BULK_COLUMNS + ("updated_at",))
    ops = connection.ops
    with _cursor() as cursor:
        if is_postgres():
            constants = tuple(NEW_ROW.values())
            # Django wraps execute()'s errors, not COPY's: the same IntegrityError either way.
            with connection.wrap_database_errors, cursor.copy(
                    f"COPY jobs_job ({columns}, {', '.join(NEW_ROW)}) FROM STDIN") as copy:
                for job in jobs:
                    copy.write_row(_new_values(job, uuid.uuid4(), ops=ops) + constants)
        else:
            marks = ", ".join(["%s"] * (len(BULK_COLUMNS) + 1))
            cursor.executemany(
                f"INSERT INTO jobs_job ({columns}, {', '.join(NEW_ROW)}) "
                f"VALUES ({marks}, {', '.join(BULK_CONSTANTS.values())})",
                [_new_values(job, uuid.uuid4(), ops=ops) for job in jobs],
            )


def _new_values(job, public_id=None, *, ops):
    """BULK_COLUMNS' values of a resolved job, then updated_at: what a new job's row holds."""
    adapt = ops.adapt_datetimefield_value
    return (
        (public_id or job.public_id).hex, job.kind, job.queue, job.payload_text, job.priority,
        job.owner_id, job.fingerprint,
        json.dumps(job.concurrency_keys) if job.concurrency_keys else "[]",  # most have none
        job.rate_key, job.blocked_key, job.on_dependency_failure, job.max_attempts,
        adapt(job.run_after), adapt(job.enqueued_at), adapt(job.enqueued_at),
    )


# --- The claim -----------------------------------------------------------------

# Every served queue's first candidates in one statement (PostgreSQL): a
# LATERAL subquery per queue walks that queue's slice of the claim index.
FIRST_CANDIDATES = f"""
SELECT j.id, j.queue, j.concurrency_keys, j.rate_key FROM unnest(%s::text[]) WITH ORDINALITY AS q(name, n)
CROSS JOIN LATERAL (
    SELECT * FROM jobs_job
    WHERE {CLAIMABLE_SQL} AND queue = q.name
      AND kind = ANY(%s) AND run_after <= STATEMENT_TIMESTAMP()
    ORDER BY {order.SQL}
    LIMIT %s FOR UPDATE SKIP LOCKED
) j
ORDER BY q.n, {", ".join(f"j.{term}" for term in order.SQL.split(", "))}
"""


class Candidate:
    """A READY row as the claim decides on it (jobs/engine/limits.py's `fit`): its id, queue and keys.

    No model: a claim reads more candidates than it takes, and the rows it
    takes come back whole from `mark_running`.
    """

    __slots__ = ("pk", "queue", "concurrency_keys", "rate_key")
    COLUMNS = ("id", "queue", "concurrency_keys", "rate_key")

    def __init__(self, pk, queue, concurrency_keys, rate_key):
        self.pk, self.queue, self.rate_key = pk, queue, rate_key
        self.concurrency_keys = _KEYS_FIELD.from_db_value(concurrency_keys, None, connection)


_KEYS_FIELD = Job._meta.get_field("concurrency_keys")


def candidates(statement, params):
    """Send a candidate query that selects Candidate.COLUMNS; Pending Candidates, in its order."""
    return Pending(statement, params, convert=Candidate)


def first_candidates(queues, kinds, count):
    """Each queue's first `count` claimable jobs in claim order, locked, skipping held rows."""
    return candidates(FIRST_CANDIDATES, [queues, list(kinds), count])


def lock_queue(name):
    """Lock a queue's row; Pending (paused, concurrency, gap_seconds, seconds its rest has
    left or None) or no row.

    The database's clock says how long it rests, as it does for leases:
    workers' clocks may differ.
    """
    if is_postgres():
        rest_left = "EXTRACT(EPOCH FROM rests_until - STATEMENT_TIMESTAMP())::float8"
        lock = " FOR UPDATE"
    else:
        rest_left, lock = "(julianday(rests_until) - julianday('now')) * 86400.0", ""
    return Pending(f"SELECT paused, concurrency, gap_seconds, {rest_left} FROM jobs_queue "
                   f"WHERE name = %s{lock}", [name])


def count_running(queue):
    """Pending [(number of RUNNING jobs of `queue`,)]."""
    return Pending("SELECT count(*) FROM jobs_job WHERE queue = %s AND status = 'RUNNING'", [queue])


_JOB_FIELDS = Job._meta.concrete_fields
_job_converters = {}


def _job_columns(table="jobs_job"):
    return ", ".join(f'{table}."{field.column}"' for field in _JOB_FIELDS)


def _to_job(*row):
    """A row of `_job_columns()` as a Job, as Job.objects.raw() would build it, less the
    per-call work of matching columns to fields: each field's converters are found once."""
    converters = _job_converters.get(connection.alias)
    if converters is None:
        converters = _job_converters[connection.alias] = [
            (i, column, conv)
            for i, field in enumerate(_JOB_FIELDS)
            for column in [field.get_col(Job._meta.db_table)]
            for conv in connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        ]
    row = list(row)
    for i, column, convert in converters:
        row[i] = convert(row[i], column, connection)
    return Job.from_db(connection.alias, [field.attname for field in _JOB_FIELDS], row)


def _running(worker, token, lease_s):
    """The SET list, and its parameters, that makes a READY row RUNNING under a new lease."""
    token = Job._meta.get_field("lease_token").get_db_prep_value(token, connection)
    if is_postgres():
        expires = f"{now()} + %s * interval '1 second'"
        append = "worker_ids || %s::jsonb"
        params = [worker.pk, token, lease_s, json.dumps([worker.name])]
    else:
        expires = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %s)"
        append = "json_insert(worker_ids, '$[#]', %s)"
        params = [worker.pk, token, f"+{lease_s} seconds", worker.name]
    return (
        f"status = 'RUNNING', worker_id = %s, lease_token = %s, "
        f"lease_expires_at = {expires}, attempts = attempts + 1, started_at = {now()}, "
        # The right-hand started_at is the previous attempt's: a row attempted
        # before first_started_at existed keeps the earliest start it knows.
        f"first_started_at = COALESCE(first_started_at, started_at, {now()}), "
        f"updated_at = {now()}, stop_requested = '', blocked_key = NULL, "
        f"worker_ids = {append}"
    ), params


def mark_running(ids, *, worker, token, lease_s):
    """The claim's final step: the chosen jobs RUNNING under one new lease, by id; returns
    their rows as Jobs, in the order of `ids`."""
    running, params = _running(worker, token, lease_s)
    marks = ", ".join(["%s"] * len(ids))
    rows = Pending(f"UPDATE jobs_job SET {running} WHERE id IN ({marks}) RETURNING {_job_columns()}",
                   [*params, *ids], convert=_to_job).rows()
    by_id = {job.pk: job for job in rows}
    return [by_id[pk] for pk in ids]


# The claim of jobs that need no limit (PostgreSQL), in one statement: each
# queue's first candidates in claim order, locked, cut to the queue's cap and
# to the claim's limit, then cut again before the first one that carries a
# concurrency or rate key (which jobs/engine/limits.py must decide on, in order),
# then marked RUNNING. Its last rows name the queues that hold a claimable job
# it did not take: one of its own it left, or one of `elsewhere` (a queue with
# a limit, and those after it) that no other claimer holds.
#
# It runs on its generic plan (claim_plain), so its per-queue LIMIT is in its
# text, `fetch`: a generic plan made without knowing the LIMIT sorts the whole
# backlog (docs/performance.md, sixth and eighth rounds).
CLAIM_PLAIN = f"""
WITH candidate AS (
    SELECT j.*, q.name, q.n, q.cap
    FROM unnest(%s::text[], %s::int[]) WITH ORDINALITY AS q(name, cap, n)
    CROSS JOIN LATERAL (
        SELECT id, priority, position, enqueued_at,
               concurrency_keys IS DISTINCT FROM '[]'::jsonb
               OR rate_key IS DISTINCT FROM '' AS keyed
        FROM jobs_job
        WHERE {CLAIMABLE_SQL} AND queue = q.name
          AND kind = ANY(%s) AND run_after <= STATEMENT_TIMESTAMP()
        ORDER BY {order.SQL}
        LIMIT {{fetch}} FOR UPDATE SKIP LOCKED
    ) j
), ranked AS (
    SELECT id, keyed, row_number() OVER (ORDER BY n, {order.SQL}) AS rank
    FROM (SELECT *, row_number() OVER (PARTITION BY n ORDER BY {order.SQL}) AS in_queue
          FROM candidate) c
    WHERE in_queue <= cap
), taken AS (
    SELECT id, rank FROM (
        SELECT id, rank, bool_or(keyed) OVER (ORDER BY rank) AS from_first_key FROM ranked
    ) r
    WHERE rank <= %s AND NOT from_first_key
), claimed AS (
    UPDATE jobs_job SET {{running}} FROM taken WHERE jobs_job.id = taken.id
    RETURNING {_job_columns()}, taken.rank
), waiting AS (
    SELECT name FROM candidate WHERE id NOT IN (SELECT id FROM taken)
    UNION
    SELECT q.name FROM unnest(%s::text[]) AS q(name) CROSS JOIN LATERAL (
        -- In claim order, so the scan walks that queue's slice of the claim
        -- index instead of the whole table.
        SELECT 1 FROM jobs_job
        WHERE {CLAIMABLE_SQL} AND queue = q.name
          AND kind = ANY(%s) AND run_after <= STATEMENT_TIMESTAMP()
        ORDER BY {order.SQL}
        LIMIT 1 FOR UPDATE SKIP LOCKED
    ) j
)
SELECT *, NULL FROM claimed
UNION ALL
SELECT {", ".join(["NULL"] * (len(_JOB_FIELDS) + 1))}, name FROM waiting
"""


def claim_plain_statement(caps, kinds, limit, *, elsewhere, worker, token, lease_s):
    """CLAIM_PLAIN and its parameters, for `claim_plain` (and for a look at its plan).

    Each queue's candidates are fetched up to the next power of two of the
    largest cap: a handful of texts, each prepared once, instead of one per
    cap. The caps themselves are parameters, applied after the fetch.
    """
    running, params = _running(worker, token, lease_s)
    kinds = list(kinds)
    fetch = 1 << (max(caps.values()) - 1).bit_length()
    return CLAIM_PLAIN.format(running=running, fetch=fetch), [
        list(caps), list(caps.values()), kinds, limit, *params, list(elsewhere), kinds]


def claim_plain(caps, kinds, limit, *, elsewhere, worker, token, lease_s):
    """Claim, in one statement, up to `limit` jobs that need no limit from the queues of
    `caps` ({queue: cap}, in order), none of which has a global limit or a gap.

    Returns the jobs, in claim order, and the queues that still hold a
    claimable job after them (one of theirs that carries a key, or is past a
    cap or the limit; any of `elsewhere`'s), for the claim's checked path.
    PostgreSQL only.
    """
    statement = claim_plain_statement(caps, kinds, limit, elsewhere=elsewhere, worker=worker,
                                      token=token, lease_s=lease_s)
    with together():
        if not connection.in_atomic_block and connection.connection.prepare_threshold is not None:
            # The custom plan PostgreSQL made again at every call cost as much as running
            # it. SET LOCAL ends with the statement's own transaction: sent in the same
            # round trip, it costs none, and it reaches no other statement. (Inside a
            # caller's transaction it would; unprepared, there is no plan to keep.)
            _execute("SET LOCAL plan_cache_mode = force_generic_plan")
        claimed = Pending(*statement)
    taken, waiting = [], set()
    for row in claimed.rows():
        if row[-1] is not None:
            waiting.add(row[-1])
        else:
            taken.append((row[-2], _to_job(*row[:-2])))
    return [job for _rank, job in sorted(taken, key=lambda pair: pair[0])], waiting


# --- Concurrency keys ----------------------------------------------------------


def has_key_condition(column="concurrency_keys"):
    """A WHERE fragment true when the JSON list `column` contains the parameter."""
    if is_postgres():
        return f"{column} @> jsonb_build_array(%s::text)"
    return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE value = %s)"


def lock_limits(keys):
    """Lock the limit rows of `keys` (sorted, so two lockers never deadlock) and return {key: limit}.

    SQLite has no row locks; its IMMEDIATE transaction already serialises every writer.
    """
    if not keys:
        return {}
    keys = sorted(set(keys))
    marks = ",".join(["%s"] * len(keys))
    lock = " FOR UPDATE" if is_postgres() else ""
    rows = _execute(
        f'SELECT key, "limit" FROM jobs_concurrencylimit WHERE key IN ({marks}) ORDER BY key{lock}',
        keys,
    )
    # A row edited by hand may hold anything: read it as the nearest sane limit.
    return {key: bounds.sane(limit, low=0, high=bounds.LIMIT_MAX, default=1,
                             what=f"the limit of key {key!r}")
            for key, limit in rows}


def lock_rates(keys):
    """Lock the rate rows of `keys` (sorted) and return their (key, limit, period_seconds, starts)."""
    if not keys:
        return []
    keys = sorted(set(keys))
    marks = ",".join(["%s"] * len(keys))
    lock = " FOR UPDATE" if is_postgres() else ""
    rows = _execute(
        f'SELECT key, "limit", period_seconds, starts FROM jobs_ratelimit WHERE key IN ({marks}) '
        f"ORDER BY key{lock}",
        keys,
    )
    return [(key, limit, period, _json_list(starts)) for key, limit, period, starts in rows]


def _json_list(value):
    """A JSON list column as Python (SQLite hands over text); [] for anything else (a hand edit)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


def clock_epoch():
    """The database's clock now, in epoch seconds: the time every rate window is kept in.

    clock_timestamp(), not the statement's or transaction's start: a claimer
    that waited for a rate row's lock dates its starts after the ones it waited for.
    """
    if is_postgres():
        [(now,)] = _execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")
    else:
        [(now,)] = _execute("SELECT (julianday('now') - 2440587.5) * 86400.0")
    return float(now)


def rate_opening_in():
    """Seconds from now (the database's clock) to the earliest rate window opening, or None."""
    if is_postgres():
        [(seconds,)] = _execute("SELECT EXTRACT(EPOCH FROM min(opens_at) - clock_timestamp())::float8 "
                                "FROM jobs_ratelimit WHERE opens_at IS NOT NULL")
    else:
        [(seconds,)] = _execute("SELECT (julianday(min(opens_at)) - julianday('now')) * 86400.0 "
                                "FROM jobs_ratelimit WHERE opens_at IS NOT NULL")
    return None if seconds is None else float(seconds)


def park_rate_backlog(rate_key, blocked_key, queue, batch):
    """Park up to `batch` more claimable jobs of `queue` with `rate_key` (its rate row is locked)."""
    _park_claimable(blocked_key, queue, batch, f"rate_key = %s AND run_after <= {now(come=True)}", [rate_key])


def running_counts(keys):
    """{key: number of RUNNING jobs carrying it} for the given keys."""
    if not keys:
        return {}
    keys = sorted(set(keys))
    if is_postgres():
        rows = _execute(
            # The type test first: one hand-edited row that is no array would make
            # the function fail every claim.
            "SELECT k, count(*) FROM jobs_job j, jsonb_array_elements_text("
            "CASE WHEN jsonb_typeof(j.concurrency_keys) = 'array' THEN j.concurrency_keys "
            "ELSE '[]'::jsonb END) k "
            "WHERE j.status = 'RUNNING' AND k = ANY(%s) GROUP BY k",
            [keys],
        )
    else:
        marks = ",".join(["%s"] * len(keys))
        rows = _execute(
            "SELECT k.value, count(*) FROM jobs_job j, json_each(j.concurrency_keys) k "
            f"WHERE j.status = 'RUNNING' AND k.value IN ({marks}) GROUP BY k.value",
            keys,
        )
    return dict(rows)


def park_backlog(key, queue, batch):
    """Park up to `batch` more claimable jobs of `queue` that carry `key` (its limit row is locked)."""
    _park_claimable(key, queue, batch, has_key_condition(), [key])


def _park_claimable(blocked_key, queue, batch, condition, params):
    """Set `blocked_key` on up to `batch` claimable jobs of `queue` matching `condition`
    (skipping rows another claim holds, on PostgreSQL)."""
    skip = " FOR UPDATE SKIP LOCKED" if is_postgres() else ""
    _execute(
        "UPDATE jobs_job SET blocked_key = %s WHERE id IN ("
        f"SELECT id FROM jobs_job WHERE {CLAIMABLE_SQL} AND queue = %s "
        f"AND {condition} LIMIT %s{skip})",
        [blocked_key, queue, *params, batch],
    )


# --- Ends of attempts -------------------------------------------------------------


def complete_batch(rows):
    """Mark RUNNING jobs SUCCESSFUL in one statement; `rows` are (id, lease token, result).

    Each row is guarded by its own token; returns {id: (has_dependents,
    (asked_fingerprint, asked_payload))} for the rows that matched (a job whose
    lease was lost meanwhile is left alone).
    """
    done = _execute(*complete_batch_statement(rows))
    payload = Job._meta.get_field("asked_payload")  # its text decoded as the ORM would
    return {job_id: (bool(has_dependents), (fingerprint, payload.from_db_value(asked, None, connection)))
            for job_id, has_dependents, fingerprint, asked in done}


def complete_batch_statement(rows):
    """The statement of `complete_batch` and its parameters (and for a look at its plan)."""
    token_field = Job._meta.get_field("lease_token")
    params = []
    row = "(%s::bigint, %s::uuid, %s::jsonb)" if is_postgres() else "(%s, %s, %s)"
    for job_id, token, result in rows:
        params += [job_id, token_field.get_db_prep_value(token, connection),
                   None if result is None else json.dumps(result)]
    ids = [job_id for job_id, _token, _result in rows]
    return (
        f"WITH v(id, token, result) AS (VALUES {', '.join([row] * len(rows))}) "
        "UPDATE jobs_job SET status = 'SUCCESSFUL', "
        "result = (SELECT v.result FROM v WHERE v.id = jobs_job.id), "
        f"progress = 1.0, finished_at = {now()}, updated_at = {now()}, "
        "error = '', error_code = '', worker_id = NULL, lease_token = NULL, "
        "lease_expires_at = NULL, blocked_key = NULL, stop_requested = '' "
        # Found by id, as complete_plain's rows are (see there).
        f"WHERE id IN ({', '.join(['%s'] * len(ids))}) AND status IS NOT DISTINCT FROM 'RUNNING' "
        "AND EXISTS (SELECT 1 FROM v WHERE v.id = jobs_job.id AND v.token = jobs_job.lease_token) "
        "RETURNING id, has_dependents, asked_fingerprint, asked_payload",
        [*params, *ids],
    )


def complete_plain(rows, *, minute, event_kind, event_data):
    """PostgreSQL: mark RUNNING jobs SUCCESSFUL, note their events and count them in the rollup,
    all in one statement; `rows` are (id, lease token, result, took_s, histogram bucket).

    For jobs whose end frees nothing and runs nothing of the app (see
    transitions.complete_many): one statement is its own transaction, so the
    event and the rollup's count commit with the transition or not at all,
    with no BEGIN and COMMIT round trips. Each row is guarded by its token, by
    `NOT has_dependents` and by no newer data or payload asked of it: such a
    job is left RUNNING for the caller to finish in a transaction that decides
    its dependents or queues its next run. A link being made, or a request, locks
    the row first, so this UPDATE waits for it and sees what it wrote.
    Returns the ids that were completed.
    """
    return {job_id for (job_id,) in _execute(*complete_plain_statement(
        rows, minute=minute, event_kind=event_kind, event_data=event_data))}


def complete_plain_statement(rows, *, minute, event_kind, event_data):
    """The statement of `complete_plain` and its parameters (and for a look at its plan)."""
    token_field = Job._meta.get_field("lease_token")
    ids, tokens, results, took, buckets = zip(*rows, strict=True)
    params = [list(ids), [token_field.get_db_prep_value(token, connection) for token in tokens],
              [None if result is None else json.dumps(result) for result in results],
              list(took), list(buckets)]
    minute = JobRollup._meta.get_field("minute").get_db_prep_value(minute, connection)
    at = JobEvent._meta.get_field("at").get_db_prep_value(timezone.now(), connection)
    counts = ", ".join(f"count(*) FILTER (WHERE bucket = {i})" for i in range(len(DURATION_COLUMNS)))
    added = ", ".join(f"{name} = jobs_jobrollup.{name} + excluded.{name}" for name in _ROLLUP_ADDED)
    return (
        # Arrays, not a VALUES list: one text for every batch size, prepared once
        # (a list made each size a statement of its own, parsed and planned anew).
        "WITH v(id, token, result, took, bucket) AS (SELECT * FROM unnest("
        "%s::bigint[], %s::uuid[], %s::jsonb[], %s::float8[], %s::int[])), "
        "done AS (UPDATE jobs_job SET status = 'SUCCESSFUL', result = v.result, progress = 1.0, "
        f"finished_at = {now()}, updated_at = {now()}, error = '', error_code = '', "
        "worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, blocked_key = NULL, "
        # Found by id: the ids are the primary key's index condition, and the status is
        # tested as IS NOT DISTINCT FROM (the same test of a NOT NULL column) so that no
        # index on `status = ...` matches. With `status = 'RUNNING'` the planner walked
        # such an index (the running one), whose dead entries a bitmap scan never
        # clears: each batch cost more than the last (docs/performance.md, eighth round).
        "stop_requested = '' FROM v WHERE v.id = jobs_job.id AND jobs_job.id = ANY(%s::bigint[]) "
        "AND jobs_job.status IS NOT DISTINCT FROM 'RUNNING' "
        "AND jobs_job.lease_token = v.token AND NOT jobs_job.has_dependents "
        "AND jobs_job.asked_fingerprint = '' AND jobs_job.asked_payload IS NULL "
        "RETURNING jobs_job.id, jobs_job.attempts, jobs_job.queue, jobs_job.kind, v.took, v.bucket), "
        "events AS (INSERT INTO jobs_jobevent (job_id, at, kind, reason, attempt, data, actor_id) "
        "SELECT id, %s, %s, '', attempts, %s::jsonb, NULL FROM done), "
        # Sorted, as upsert_rollup's rows are, so two writers lock them in one order.
        f"counted AS (INSERT INTO jobs_jobrollup (queue, kind, minute, {', '.join(_ROLLUP_ADDED)}, "
        "took_max_s) SELECT queue, kind, %s, count(*), 0, 0, 0, count(took), "
        f"COALESCE(sum(took), 0), {counts}, COALESCE(max(took), 0) FROM done "
        "GROUP BY queue, kind ORDER BY queue, kind "
        f"ON CONFLICT (queue, kind, minute) DO UPDATE SET {added}, "
        "took_max_s = GREATEST(jobs_jobrollup.took_max_s, excluded.took_max_s)) "
        "SELECT id FROM done",
        [*params, list(ids), at, event_kind, json.dumps(event_data), minute],
    )


# --- The per-minute rollup (jobs/engine/rollup.py) -----------------------------------------

_ROLLUP_ADDED = ("succeeded", "failed", "cancelled", "retried", "took_count", "took_sum_s",
                 *DURATION_COLUMNS)


def upsert_rollup(rows):
    """Add (queue, kind, minute, {column: amount}) rows to the rollup: insert, or add to the row
    already there.

    ON CONFLICT ... DO UPDATE is one statement on PostgreSQL and SQLite alike:
    racing writers of one minute each add their own share, none is lost. The
    rows must be distinct and sorted (one statement may not touch a row twice,
    and a fixed order keeps two writers from deadlocking).
    """
    columns = ("queue", "kind", "minute", *_ROLLUP_ADDED, "took_max_s")
    minute_field = JobRollup._meta.get_field("minute")
    params, values = [], []
    for queue, kind, minute, amounts in rows:
        values.append("(" + ", ".join(["%s"] * len(columns)) + ")")
        params += [queue, kind, minute_field.get_db_prep_value(minute, connection),
                   *(amounts[name] for name in _ROLLUP_ADDED), amounts["took_max_s"]]
    added = ", ".join(f"{name} = jobs_jobrollup.{name} + excluded.{name}" for name in _ROLLUP_ADDED)
    _execute(
        f"INSERT INTO jobs_jobrollup ({', '.join(columns)}) VALUES {', '.join(values)} "
        f"ON CONFLICT (queue, kind, minute) DO UPDATE SET {added}, "
        "took_max_s = CASE WHEN excluded.took_max_s > jobs_jobrollup.took_max_s "
        "THEN excluded.took_max_s ELSE jobs_jobrollup.took_max_s END",
        params,
    )


def insert_samples(rows):
    """Insert (queue, minute, ready, waiting, running, latency_s) samples; a minute a worker
    sampled first keeps that worker's."""
    if not rows:
        return
    minute_field = QueueSample._meta.get_field("minute")
    params, values = [], []
    for queue, minute, *numbers in rows:
        values.append("(%s, %s, %s, %s, %s, %s)")
        params += [queue, minute_field.get_db_prep_value(minute, connection), *numbers]
    _execute(
        "INSERT INTO jobs_queuesample (queue, minute, ready, waiting, running, latency_s) "
        f"VALUES {', '.join(values)} ON CONFLICT (queue, minute) DO NOTHING",
        params,
    )


def count_failure(target, kind, error_code, job_id, at):
    """One more failure of `kind` with `error_code` for a notice target (jobs/notices.py).

    An upsert, so the first failures of an outage racing to create the row
    all count; the row stays locked until the failing job's transaction ends.
    """
    since = FailureNotice._meta.get_field("since").get_db_prep_value(at, connection)
    _execute(
        "INSERT INTO jobs_failurenotice (target, kind, error_code, pending, since, last_job_id, "
        "scheduled) VALUES (%s, %s, %s, 1, %s, %s, %s) "
        "ON CONFLICT (target, kind, error_code) DO UPDATE SET "
        "pending = jobs_failurenotice.pending + 1, "
        "since = COALESCE(jobs_failurenotice.since, excluded.since), "
        "last_job_id = excluded.last_job_id",
        [target, kind, error_code, since, job_id, False],
    )


def insert_events(jobs, kind, data):
    """One JobEvent per job (at its attempt), all alike, in one statement: a batch's transition."""
    if not jobs:
        return
    text = json.dumps(data)
    # This process's clock, as every other event's `at` (events are ordered by it).
    at = JobEvent._meta.get_field("at").get_db_prep_value(timezone.now(), connection)
    _execute(
        "INSERT INTO jobs_jobevent (job_id, at, kind, reason, attempt, data, actor_id) VALUES "
        + ", ".join(["(%s, %s, %s, '', %s, %s, NULL)"] * len(jobs)),
        [value for job in jobs for value in (job.pk, at, kind, job.attempts, text)],
    )


# --- Wake-ups ------------------------------------------------------------------


def notify(channel, payload):
    """PostgreSQL NOTIFY on `channel`, delivered when the surrounding transaction commits."""
    _execute("SELECT pg_notify(%s, %s)", [channel, payload])


# --- Counting without a scan (PostgreSQL) ---------------------------------------------


# Each queue's earliest run_after among its claimable jobs, skipping from one
# queue to the next through `jobs_job_waiting`: one index probe per queue,
# however many jobs wait (PostgreSQL has no skip scan of its own).
EARLIEST_WAITING = f"""
WITH RECURSIVE head AS (
    (SELECT queue, run_after FROM jobs_job WHERE {CLAIMABLE_SQL}
     ORDER BY queue, run_after LIMIT 1)
    UNION ALL
    SELECT next.queue, next.run_after FROM head CROSS JOIN LATERAL (
        SELECT queue, run_after FROM jobs_job
        WHERE {CLAIMABLE_SQL} AND queue > head.queue
        ORDER BY queue, run_after LIMIT 1
    ) next
)
SELECT queue, run_after FROM head
"""


def earliest_waiting():
    """{queue: the earliest run_after of its claimable jobs} (a future one when none is due)."""
    if not is_postgres():
        return dict(Job.objects.filter(CLAIMABLE).order_by()
                    .values_list("queue").annotate(earliest=Min("run_after")))
    return dict(_execute(EARLIEST_WAITING))


def table_rows_estimate():
    """The planner's idea of how many rows jobs_job holds (kept by ANALYZE; -1 before the first)."""
    [(rows,)] = _execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'jobs_job'::regclass")
    return rows


def rows_estimate(queue, status):
    """The planner's row estimate for one queue and state, from column statistics: never a scan."""
    [(plan,)] = _execute(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs_job WHERE queue = %s AND status = %s",
        [queue, status])
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])
