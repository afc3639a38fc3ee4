import logging

from django.core.management.base import BaseCommand, CommandError

from jobs import registry, scheduler
from jobs.worker import Worker, install_signal_handlers


class Command(BaseCommand):
    help = (
        "Run a Haulage worker: claim jobs from the queues and run them until stopped. "
        "SIGTERM/SIGINT once: stop claiming and let running jobs finish (then requeue them); "
        "twice: requeue them now."
    )

    def add_arguments(self, parser):
        parser.add_argument("--queues", default="",
                            help="comma-separated queues to serve, in order "
                                 "(default: every queue a registered kind uses)")
        parser.add_argument("--concurrency", type=int, default=20,
                            help="jobs run at once by this process (default: 20; each claim takes "
                                 "up to the free slots, so more slots mean bigger batches). "
                                 "Per-user, per-asset and per-queue limits still apply; lower it "
                                 "on machines that run heavy process-mode jobs")
        parser.add_argument("--burst", action="store_true",
                            help="exit once nothing is claimable and nothing is running")
        parser.add_argument("--max-jobs", type=int, default=None,
                            help="exit after claiming this many jobs (and finishing them)")
        parser.add_argument("--worker-id", default=None,
                            help="name recorded on jobs and in the admin (default: host:pid)")
        parser.add_argument("--kinds", default=None,
                            help="comma-separated kinds to serve (default: every registered kind)")
        parser.add_argument("--no-scheduler", action="store_true",
                            help="do not start the scheduler role (django-q2's cluster firing "
                                 "schedules); run `manage.py qcluster` apart, or let other "
                                 "runworkers do it. Implied by --burst and --max-jobs")

    def handle(self, *args, queues, concurrency, burst, max_jobs, worker_id, kinds, no_scheduler,
               **options):
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1.")
        if max_jobs is not None and max_jobs < 1:
            raise CommandError("--max-jobs must be at least 1.")
        known = set(registry.names())
        wanted = [k for k in (kinds or "").split(",") if k]
        unknown = sorted(set(wanted) - known)
        if unknown:
            raise CommandError(f"Unknown kinds: {', '.join(unknown)}.")
        logging.getLogger("jobs").setLevel(logging.INFO)
        worker = Worker(
            queues=[q for q in queues.split(",") if q],
            concurrency=concurrency,
            burst=burst,
            max_jobs=max_jobs,
            name=worker_id,
            kinds=wanted or None,
            # A worker meant to exit soon is no place for a long-lived role.
            companions=[] if no_scheduler or burst or max_jobs or not scheduler.available()
            else [scheduler.SchedulerRole()],
        )
        install_signal_handlers(worker)
        if worker.run():
            raise CommandError("The worker could not start; see the log above.")
