"""Waking idle workers: LISTEN/NOTIFY on PostgreSQL, an in-process event otherwise.

Polling every JOBS_POLL_SECONDS stays as the fallback, so a lost notification
(a dropped listening connection) costs at most one poll interval.
"""

import logging
import threading

from django.db import connection, transaction

from jobs import conf
from jobs.engine import queries

log = logging.getLogger("jobs.wakeup")  # its name before the move: logging configs name it

JOBS_CHANNEL = "haulage_jobs"  # payload: the queue name
STOP_CHANNEL = "haulage_stop"  # payload: the id of a job asked to cancel or pause

# Events of workers running in this process (SQLite, tests, the embedded
# mode), set when the enqueueing transaction commits.
_job_events = set()
_stop_events = set()


def subscribe(*, jobs, stop):
    _job_events.add(jobs)
    _stop_events.add(stop)


def unsubscribe(*, jobs, stop):
    _job_events.discard(jobs)
    _stop_events.discard(stop)


def _set_all(events):
    for event in list(events):
        event.set()


def notify(queue, *, sent=False):
    """Wake the workers of `queue` once the surrounding transaction commits, never before.

    `sent`: the statement that wrote the job carried PostgreSQL's NOTIFY
    itself (queries.insert_job); only this process's own workers are left.
    """
    if not sent and queries.is_postgres():
        queries.notify(JOBS_CHANNEL, queue)
    if _job_events:
        transaction.on_commit(lambda: _set_all(_job_events))


def notify_stop(job_id):
    """Tell workers that job `job_id` was asked to stop, once the transaction commits."""
    if queries.is_postgres():
        queries.notify(STOP_CHANNEL, str(job_id))
    if _stop_events:
        transaction.on_commit(lambda: _set_all(_stop_events))


def listen_params():
    """psycopg's connection parameters for LISTEN, or None when workers must poll instead.

    A LISTEN lasts as long as its session, so it never goes through a
    transaction pooler: the server connection it was sent on serves other
    clients after the transaction, and their notifications would be lost.
    JOBS_LISTEN_DATABASE reaches the same database directly (NOTIFY is per
    database, so its name defaults to the default connection's).
    """
    direct = conf.JOBS_LISTEN_DATABASE
    if not direct and conf.JOBS_DATABASE_POOLER == "transaction":
        return None
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    if direct:
        for key, name in [("HOST", "host"), ("PORT", "port"), ("USER", "user"),
                          ("PASSWORD", "password"), ("NAME", "dbname")]:
            if direct.get(key):
                params[name] = direct[key]
        params.update(direct.get("OPTIONS") or {})
    return params


class Listener(threading.Thread):
    """One LISTEN connection per worker process; reconnects when it drops.

    Calls `on_jobs(queue)` and `on_stop(job_id)` from this thread.
    """

    def __init__(self, *, on_jobs, on_stop, stopping):
        super().__init__(name="haulage-listener", daemon=True)
        self.on_jobs = on_jobs
        self.on_stop = on_stop
        self.stopping = stopping
        self.connected = threading.Event()

    def run(self):
        import psycopg

        params = listen_params()
        if params is None:
            log.info("the database is behind a transaction pooler and JOBS_LISTEN_DATABASE is "
                     "not set: polling every %ss instead of listening", conf.JOBS_POLL_SECONDS)
            return
        while not self.stopping.is_set():
            try:
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {JOBS_CHANNEL}")
                    conn.execute(f"LISTEN {STOP_CHANNEL}")
                    self.connected.set()
                    # A wake-up after (re)connecting covers what was sent while deaf.
                    self.on_jobs(None)
                    self._serve(conn)
            except Exception as exc:  # noqa: BLE001 - any failure: back off and reconnect
                self.connected.clear()
                if not self.stopping.is_set():
                    log.warning("LISTEN connection lost (%s); reconnecting", exc.__class__.__name__)
                    self.stopping.wait(1.0)

    def _serve(self, conn):
        while not self.stopping.is_set():
            # Short waits so a stop request is seen promptly; a dropped
            # connection raises here and the caller reconnects.
            for note in conn.notifies(timeout=1.0):
                if note.channel == STOP_CHANNEL:
                    self.on_stop(note.payload)
                else:
                    self.on_jobs(note.payload)
