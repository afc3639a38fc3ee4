"""Read paths for the pages and the admin. Nothing here writes."""

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from downloads.models import DownloadStatus
from jobs.models import JobStatus
from subscriptions.intervals import describe_interval
from subscriptions.messages import error_message
from subscriptions.models import Entry, Outcome, Subscription

RECENT_DOWNLOADS = 5


def subscriptions_of(user):
    return Subscription.objects.filter(owner=user).select_related("check_job")


def subscription_of(user, subscription_id):
    """The user's subscription with this id, or None (another user's id reads as absent)."""
    return subscriptions_of(user).filter(pk=subscription_id).first()


def entries_of(sub):
    """What the subscription's checks took, newest first, with the downloads they requested."""
    return Entry.objects.filter(subscription=sub).select_related(
        "download", "download__asset", "download__job")


def entry_rows(sub, *, limit):
    """(entry, its download's status label or "") for the detail page, newest first."""
    rows = []
    for entry in entries_of(sub)[:limit]:
        label = DownloadStatus(entry.download.current_status).label if entry.download else ""
        rows.append((entry, label))
    return rows


@dataclass
class SubscriptionState:
    sub: Subscription
    checking: bool  # a check is queued or running
    summary: str  # what the last check found, or "" before the first one
    left_note: str  # why new entries wait for the next check, or ""
    error: str  # what went wrong in the last check, or ""
    interval: str
    entries: list  # the latest entries requested, each with its download

    @property
    def state(self):
        return "paused" if self.sub.paused else "active"

    @property
    def checked_just_now(self):
        checked = self.sub.last_checked_at
        return checked is not None and timezone.now() - checked < timedelta(minutes=1)

    @property
    def next_check_due(self):
        return self.sub.next_check_at <= timezone.now()

    @property
    def actions(self):
        return ("resume",) if self.sub.paused else ("check", "pause")


def subscription_state(sub, *, recent=RECENT_DOWNLOADS):
    job = sub.check_job
    checking = job is not None and job.status in (JobStatus.READY, JobStatus.RUNNING)
    summary = left_note = error = ""
    if sub.last_outcome == Outcome.OK:
        summary = _summary(sub)
        if sub.last_left:
            left_note = ngettext(
                "%(n)d left for the next check: your download queue is full.",
                "%(n)d left for the next check: your download queue is full.",
                sub.last_left) % {"n": sub.last_left}
    elif sub.last_outcome == Outcome.FAILED:
        error = str(error_message(sub.last_error_code))
    entries = [e for e in entries_of(sub).filter(download__isnull=False)[:recent]]
    return SubscriptionState(sub=sub, checking=checking, summary=summary, left_note=left_note,
                             error=error, interval=describe_interval(sub.interval_s),
                             entries=entries)


def _summary(sub):
    if not sub.last_new:
        return _("Nothing new.")
    found = ngettext("Found %(n)d new entry", "Found %(n)d new entries",
                     sub.last_new) % {"n": sub.last_new}
    requested = ngettext("requested %(n)d download", "requested %(n)d downloads",
                         sub.last_requested) % {"n": sub.last_requested}
    return _("%(found)s, %(requested)s.") % {"found": found, "requested": requested}
