"""Where a job stands: its place in the queue and why it is waiting.

Pages, the JSON API and the admin ask only this module, and it answers from
the rules the claim itself uses (jobs/engine/order.py, jobs/engine/limits.py), so "3 ahead
of you" is what the workers will really do. Everything here reads; nothing writes.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from jobs import conf
from jobs.engine import dependencies, limits, order, registry
from jobs.exceptions import TransportUnavailable
from jobs.models import LIVE_STATUSES, Action, Job, JobStatus, Outcome, Queue, Worker

# How a concurrency key's namespace reads to a person ("user:42" is "your
# other jobs"); apps add theirs with `describe_key`.
_KEY_WORDS = {}


def describe_key(namespace, words):
    """Say how a full key of this namespace reads on a page, e.g. ("asset", "the same video is downloading")."""
    _KEY_WORDS[namespace] = words


@dataclass
class Standing:
    position: int | None  # 1 = next to be claimed in its queue; None unless READY
    # queued | scheduled | transport_unavailable | paused | queue_paused | no_worker | key_busy
    # | rate_limited | waiting_for_parents | queue_full | queue_gap | running | finished
    reason: str
    message: str
    key: str | None = None
    until: datetime | None = None


def cancelled_by_other(job):
    """For a job cancelled by someone other than its owner (staff), the reason they gave ("" for
    none); None when it was not cancelled that way."""
    if job.status != JobStatus.CANCELLED:
        return None
    event = (job.events.filter(kind__in=[Outcome.CANCELLED, Action.CANCEL_REQUESTED],
                               actor__isnull=False).order_by("-at", "-id").first())
    if event is None or event.actor_id is None or event.actor_id == job.owner_id:
        return None
    return event.reason


def live_kinds():
    """Kinds served by at least one worker whose heartbeat is recent."""
    cutoff = timezone.now() - timedelta(seconds=conf.JOBS_WORKER_DEAD_AFTER_SECONDS)
    served = set()
    for kinds in Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=cutoff).values_list(
        "kinds", flat=True
    ):
        served.update(kinds)
    return served


def standing(job, *, served_kinds=None):
    """Where `job` stands now, with a sentence a person can read."""
    if job.status == JobStatus.RUNNING:
        return Standing(None, "running", _("Running."))
    if job.status == JobStatus.PAUSED:
        return Standing(None, "paused", _("Paused."))
    if job.status != JobStatus.READY:
        return Standing(None, "finished", job.get_status_display())
    position = order.position(job)
    now = timezone.now()
    if job.error_code == TransportUnavailable.code:
        # Sent back because Redis did not answer: say that, not "retry".
        if job.run_after > now:
            return Standing(position, "transport_unavailable",
                            _("The CV queue's Redis server is unreachable; the job waits and is "
                              "sent again at %(time)s.")
                            % {"time": timezone.localtime(job.run_after).strftime("%H:%M:%S")},
                            until=job.run_after)
        return Standing(position, "transport_unavailable",
                        _("The CV queue's Redis server was unreachable at the last try; the job "
                          "waits to be sent again."))
    if job.blocked_key == limits.PARENTS:
        waiting = dependencies.parents_of(job).filter(status__in=LIVE_STATUSES).count()
        return Standing(position, "waiting_for_parents",
                        ngettext("Waiting for %(n)d earlier job to finish.",
                                 "Waiting for %(n)d earlier jobs to finish.", waiting)
                        % {"n": waiting})
    if job.run_after > now:
        local = timezone.localtime(job.run_after)
        return Standing(position, "scheduled",
                        _("Waiting to retry at %(time)s.") % {"time": local.strftime("%H:%M")},
                        until=job.run_after)
    queue = Queue.objects.filter(name=job.queue).first()
    if queue is not None and queue.paused:
        return Standing(position, "queue_paused", _("The queue is paused by staff."))
    served = live_kinds() if served_kinds is None else served_kinds
    if job.kind not in served:
        return Standing(position, "no_worker", _("No worker that runs this kind of job is running."))
    key = limits.full_key(job)
    if key is not None:
        if _claimed_since(job):
            return Standing(None, "running", _("Running."))  # its own start filled the key
        words = _KEY_WORDS.get(key.split(":", 1)[0])
        return Standing(position, "key_busy",
                        str(words) if words else _("Waiting for a free slot (%(key)s).") % {"key": key},
                        key=key)
    opens_at = limits.rate_opens_at(job)
    if opens_at is not None:
        if _claimed_since(job):
            return Standing(None, "running", _("Running."))
        return Standing(position, "rate_limited",
                        _("rate limit: next start at %(time)s")
                        % {"time": _clock(opens_at)},
                        key=job.rate_key, until=opens_at)
    full = queue is not None and queue.concurrency is not None and Job.objects.filter(
        queue=job.queue, status=JobStatus.RUNNING).count() >= queue.concurrency
    next_start = limits.resting_until(queue)
    if (full or (next_start is not None and position == 1)) and _claimed_since(job):
        # A worker took it after the caller read it: its own start fills the queue's
        # slot and begins its rest, and must not read as what holds it back.
        return Standing(None, "running", _("Running."))
    if full:
        return Standing(position, "queue_full",
                        _("The queue runs %(n)d job(s) at a time; waiting for one to finish.")
                        % {"n": queue.concurrency})
    if next_start is not None and position == 1:
        return Standing(position, "queue_gap",
                        _("The queue waits between jobs; next start at %(time)s.")
                        % {"time": _clock(next_start)},
                        until=next_start)
    if position == 1:
        return Standing(position, "queued", _("Next in line."))
    return Standing(position, "queued", _("%(n)d job(s) ahead of it.") % {"n": position - 1})


def _claimed_since(job):
    return not Job.objects.filter(pk=job.pk, status=JobStatus.READY).exists()


def queue_names():
    """Queues that have jobs or settings, plus those registered kinds use."""
    names = set(registry.queues())
    names.update(Queue.objects.values_list("name", flat=True))
    return sorted(names)


def _clock(moment):
    """A moment as the local time of day, with its date when that is not today (a rate
    window or a queue's rest may end days ahead)."""
    local = timezone.localtime(moment)
    same_day = local.date() == timezone.localdate()
    return local.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
