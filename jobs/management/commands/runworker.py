import logging
import re

from django.core.management.base import BaseCommand, CommandError

from jobs.engine import dbwait, registry
from jobs.runtime import scheduler
from jobs.runtime.worker import Worker, install_signal_handlers

QUEUE_NAME = re.compile(r"[\w.:-]{1,100}")


def parse_queues(text):
    """`--queues`: "a,b" → (["a", "b"], None); "downloads=4,default=16" → (names, {name: slots}).

    Every queue gets a slot count or none does; CommandError says what is wrong.
    """
    names, slots = [], {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        name, has_count, count = (s.strip() for s in part.partition("="))
        if not QUEUE_NAME.fullmatch(name):
            raise CommandError(f"--queues: {name!r} is no queue name (letters, digits, . _ : -).")
        if name in names:
            raise CommandError(f"--queues: {name!r} is named twice.")
        names.append(name)
        if has_count:
            if not count.isdigit() or not 1 <= int(count) <= 1000:
                raise CommandError(f"--queues: the slots of {name!r} must be a whole number from "
                                   f"1 to 1000, not {count!r}.")
            slots[name] = int(count)
    if slots and len(slots) != len(names):
        raise CommandError("--queues: give every queue its slots (downloads=4,default=16) or "
                           "none (downloads,default), not some.")
    return names, slots or None


class Command(BaseCommand):
    help = (
        "Run a Haulage worker: claim jobs from the queues and run them until stopped. "
        "SIGTERM/SIGINT once: stop claiming and let running jobs finish (then requeue them); "
        "twice: requeue them now."
    )

    def add_arguments(self, parser):
        parser.add_argument("--queues", default="",
                            help="comma-separated queues to serve, in order (default: every "
                                 "queue a registered kind, a Tasks backend or JOBS_QUEUES "
                                 "names); with slots, e.g. "
                                 "downloads=4,insights=1,default=16, each queue runs at most its "
                                 "own number of jobs at once and --concurrency is their sum")
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
        names, slots = parse_queues(queues)
        # Not refused: enqueue(queue=...) may name any queue. But a typo would
        # leave this worker idle for ever without a word.
        used = registry.queues()
        unused = [name for name in names if name not in used]
        if unused:
            self.stderr.write(
                f"--queues: no registered kind, Tasks backend or JOBS_QUEUES names "
                f"{', '.join(unused)}; "
                f"this worker serves only jobs enqueued there by name (known queues: "
                f"{', '.join(used)}).")
        if max_jobs is not None and max_jobs < 1:
            raise CommandError("--max-jobs must be at least 1.")
        known = set(registry.names())
        wanted = [k for k in (kinds or "").split(",") if k]
        unknown = sorted(set(wanted) - known)
        if unknown:
            raise CommandError(f"Unknown kinds: {', '.join(unknown)}.")
        logging.getLogger("jobs").setLevel(logging.INFO)
        dbwait.stop_spinning()
        worker = Worker(
            queues=names,
            slots=slots,
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
