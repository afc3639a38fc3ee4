from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from jobs import conf
from jobs.maintenance import prune


class Command(BaseCommand):
    help = (
        "Delete finished jobs (successful, failed, cancelled) older than an age, with their "
        "events, in short batches, and the dashboard's per-minute rows of the same age. Live jobs are never touched, and domain rows (downloads, "
        "insights) keep their own state."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", default=None,
                            help="age of the finished jobs to delete, e.g. 30d, 12h, 90m "
                                 "(default: JOBS_PRUNE_AFTER, or 30d)")
        parser.add_argument("--batch-size", type=int, default=prune.BATCH_SIZE,
                            help=f"jobs deleted per transaction (default: {prune.BATCH_SIZE})")
        parser.add_argument("--pause", type=float, default=0.0, metavar="SECONDS",
                            help="sleep between batches, to spread the load of a huge prune")

    def handle(self, *args, older_than, batch_size, pause, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        try:
            age = conf.parse_age(older_than) if older_than else conf.prune_after()
        except (ValueError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from None
        result = prune.prune_finished(age, batch_size=batch_size, pause_s=pause)
        self.stdout.write(
            f"Deleted {result.jobs} finished job(s) older than {older_than or age} and "
            f"{result.events} event(s), in {result.batches} batch(es); "
            f"{result.rollups} per-minute row(s) of the same age."
        )
