"""procrastinate on PostgreSQL: LISTEN/NOTIFY wake-ups, its own `worker` command."""

import psycopg

from bench.peers.base import Peer, python

APP = "bench.peers.procrastinate_app.app"


class ProcrastinatePeer(Peer):
    name = "procrastinate"
    title = "procrastinate"
    packages = ("procrastinate", "psycopg")
    has_bulk = True
    configuration = (
        "PsycopgConnector; worker defaults: concurrency 1, LISTEN/NOTIFY on, polling 5 s, "
        "jobs kept after success; the no-op is a sync function (run in a thread); "
        "enqueue = task.defer(); bulk = task.batch_defer(); no figure in one transaction "
        "(PsycopgConnector defers on connections of its own pool, outside a caller's transaction)"
    )

    def environ(self):
        return {"BENCH_PEERS_DATABASE_URL": self.database_url}

    def _app(self):
        from bench.peers.procrastinate_app import app

        return app

    def prepare(self):
        with self._app().open() as app:
            app.schema_manager.apply_schema()

    def open(self):
        self.app = self._app().open()
        self.connection = psycopg.connect(self.database_url, autocommit=True)

    def enqueue(self, label):
        from bench.peers.procrastinate_app import noop

        noop.defer(label=label)

    def enqueue_bulk(self, labels):
        from bench.peers.procrastinate_app import noop

        noop.batch_defer(*({"label": label} for label in labels))

    def pending(self):
        return self.connection.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        ).fetchone()[0]

    def worker_argv(self):
        return [python(), "-m", "procrastinate", f"--app={APP}", "worker"]

    def close(self):
        if getattr(self, "app", None) is not None:
            self.app.close()
            self.connection.close()
