"""Haulage itself, measured by the peers' method.

Jobs go in through Django's Tasks API on Haulage's backend (bulk: the
engine's one-statement bulk enqueue of the same task); each worker process is
a `manage.py runworker` at its shipped defaults.
"""

from bench.peers.base import Peer, python


class HaulagePeer(Peer):
    name = "haulage"
    title = "Haulage"
    packages = ("django", "psycopg")
    has_bulk = True
    has_transaction = True
    configuration = (
        "Django's Tasks API on Haulage's backend; one `manage.py runworker` per process at its "
        "defaults (20 executor threads, claims and completions in batches, LISTEN/NOTIFY wake-ups)"
    )

    def environ(self):
        # Haulage's own settings module, configured the way an operator would.
        return {
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DATABASE_URL": self.database_url,
            "SECRET_KEY": "bench-peers-only-not-a-secret",
            "DEBUG": "0",
            "SECURE_SSL_REDIRECT": "0",
            "HAULAGE_VAR_DIR": str(self.scratch_dir / "var"),
            "LOG_LEVEL": "WARNING",
        }

    def prepare(self):
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)

    def open(self):
        import django

        django.setup()

    def enqueue(self, label):
        from bench.peers.haulage_jobs import noop

        noop.enqueue(label)

    def enqueue_bulk(self, labels):
        from jobs import services
        from jobs.backend import KIND

        path = "bench.peers.haulage_jobs.noop"
        services.enqueue_many([
            (KIND, {"task": path, "takes_context": False, "args": [label], "kwargs": {}}, {})
            for label in labels
        ])

    def transaction(self):
        from django.db import transaction

        return transaction.atomic()

    def pending(self):
        from jobs.models import Job, JobStatus

        return Job.objects.exclude(status=JobStatus.SUCCESSFUL).count()

    def worker_argv(self):
        return [python(), "manage.py", "runworker", "--no-scheduler"]

    def close(self):
        from django.db import connections

        connections.close_all()
