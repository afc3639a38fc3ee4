"""`manage.py runcvworker`: serve CV jobs from Redis until SIGTERM or Ctrl+C."""

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from jobs.cv import clients
from jobs.cv.worker import CVWorker, discover_handlers
from jobs.runtime import stopsignals


class Command(BaseCommand):
    help = (
        "Run a CV worker: take segment/analyze jobs from Redis, run them, write their results "
        "to media storage. Needs REDIS_URL; no database."
    )
    # A CV machine may have no database at all: no checks that would touch one.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=1,
                            help="Jobs run at the same time, one thread each (default 1).")
        parser.add_argument("--types", default="",
                            help="Comma-separated job types to serve (default: every registered type).")
        parser.add_argument("--worker-id", default="",
                            help="A stable name for this worker (default: host, pid and a random suffix).")

    def handle(self, *args, concurrency, types, worker_id, **options):
        if clients.is_local_mode():
            raise CommandError(
                "REDIS_URL is not set: in local mode `runworker` runs the CV worker itself; "
                "set REDIS_URL to run a separate CV worker."
            )
        discover_handlers()
        try:
            worker = CVWorker(
                types=[t.strip() for t in types.split(",") if t.strip()] or None,
                concurrency=concurrency,
                worker_id=worker_id or None,
            )
        except (ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc)) from None

        stopsignals.on_stop_signals(lambda signum: worker.request_stop())
        worker.run()
