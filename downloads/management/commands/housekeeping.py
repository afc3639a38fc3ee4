import json

from django.core.management.base import BaseCommand

from downloads import housekeeping, scheduled


class Command(BaseCommand):
    help = (
        "Storage housekeeping: delete the files of assets no download refers to and, when "
        "MEDIA_MAX_BYTES is set, evict the least recently used finished files until the rest "
        "fit. Runs here and now; with --enqueue, queues it for a worker instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("--enqueue", action="store_true",
                            help="queue a downloads.housekeep job (at most one live) and return")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="print the report as JSON")

    def handle(self, *args, enqueue, as_json, **options):
        if enqueue:
            self.stdout.write(f"Queued housekeeping job {scheduled.housekeeping()}")
            return
        report = housekeeping.run()
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        else:
            self.stdout.write(f"Storage housekeeping: {report.summary()}")
