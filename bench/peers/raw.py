"""The raw psycopg loop: the ceiling for a database queue that does not batch.

One minimal table; a worker claims one job with FOR UPDATE SKIP LOCKED, runs
it and marks it done in the same transaction, one job per transaction. Idle
workers wait on LISTEN/NOTIFY (a statement trigger notifies on insert), with
a one-second poll as the fallback.

    python -m bench.peers.raw   # one worker, on BENCH_PEERS_DATABASE_URL
"""

import os
import signal

import psycopg

from bench.peers import marks
from bench.peers.base import Peer, python

DATABASE_URL_ENV = "BENCH_PEERS_DATABASE_URL"
CHANNEL = "bench_job"
IDLE_POLL_S = 1.0

SCHEMA = """
CREATE TABLE bench_job (
    id bigserial PRIMARY KEY,
    label integer NOT NULL,
    status text NOT NULL DEFAULT 'ready',
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
-- Only claimable rows are indexed, so finished rows cost the claim nothing.
CREATE INDEX bench_job_ready ON bench_job (id) WHERE status = 'ready';
CREATE FUNCTION bench_job_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bench_job', '');
    RETURN NULL;
END $$;
-- Per statement: a bulk insert wakes the workers once, and the notification
-- is sent at commit, when the rows are visible to the woken worker.
CREATE TRIGGER bench_job_inserted AFTER INSERT ON bench_job
    FOR EACH STATEMENT EXECUTE FUNCTION bench_job_notify();
"""

# Claim: the oldest ready row nobody holds; SKIP LOCKED lets workers pass each other.
CLAIM = """
SELECT id, label FROM bench_job WHERE status = 'ready'
ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
"""
COMPLETE = "UPDATE bench_job SET status = 'done', finished_at = now() WHERE id = %s"


class RawPeer(Peer):
    name = "raw"
    title = "raw psycopg loop"
    packages = ("psycopg",)
    has_bulk = True
    has_transaction = True
    configuration = (
        "one job per transaction: SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1, the job, "
        "UPDATE to done, COMMIT; partial index on ready rows; LISTEN/NOTIFY wake-ups "
        f"(statement trigger), {IDLE_POLL_S:g} s poll fallback; bulk = one INSERT ... "
        "SELECT unnest(array)"
    )

    def environ(self):
        return {DATABASE_URL_ENV: self.database_url}

    def prepare(self):
        with psycopg.connect(self.database_url, autocommit=True) as connection:
            connection.execute(SCHEMA)

    def open(self):
        self.connection = psycopg.connect(self.database_url, autocommit=True)

    def enqueue(self, label):
        self.connection.execute("INSERT INTO bench_job (label) VALUES (%s)", (label,))

    def transaction(self):
        return self.connection.transaction()

    def enqueue_bulk(self, labels):
        self.connection.execute(
            "INSERT INTO bench_job (label) SELECT unnest(%s::integer[])", (labels,)
        )

    def pending(self):
        return self.connection.execute(
            "SELECT count(*) FROM bench_job WHERE status <> 'done'"
        ).fetchone()[0]

    def worker_argv(self):
        return [python(), "-m", "bench.peers.raw"]

    def close(self):
        if getattr(self, "connection", None) is not None:
            self.connection.close()


def work(database_url):
    """Claim and complete jobs until SIGTERM; between jobs only when idle, wait for NOTIFY."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(f"LISTEN {CHANNEL}")
        while not stopping:
            # The row lock taken by the claim is held until the completion
            # commits: a crash rolls both back and the job is claimable again.
            with connection.transaction():
                row = connection.execute(CLAIM).fetchone()
                if row is not None:
                    job_id, label = row
                    marks.noop(label)
                    connection.execute(COMPLETE, (job_id,))
            if row is None:
                # Notifications that arrived during the claim are kept by psycopg
                # and returned here, so a job enqueued meanwhile is not missed.
                for _ in connection.notifies(timeout=IDLE_POLL_S, stop_after=1):
                    pass


if __name__ == "__main__":
    work(os.environ[DATABASE_URL_ENV])
