"""Every change to subscriptions: one function each.

Views, the admin, the schedule and the check handler call these; none of
them writes a subscription row itself. Checks are Haulage jobs of kind
`subscriptions.check` with one unique key per subscription, so however often
they are asked for, at most one check of a subscription is queued or running.
"""

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

import jobs
from downloads import services as downloads
from downloads.addresses import validate_url
from downloads.models import Format
from jobs.exceptions import IllegalTransition
from jobs.models import LIVE_STATUSES, Job, JobStatus
from subscriptions import conf
from subscriptions.intervals import describe_interval
from subscriptions.models import Outcome, Subscription, digest

CHECK_KIND = "subscriptions.check"
# A check someone asked for runs before the scheduled ones waiting in the queue.
ASKED_PRIORITY = 10
SCHEDULED_PRIORITY = 0


def check_key(subscription_id):
    """The unique key of a subscription's check: one live check per subscription."""
    return f"subscription-check:{subscription_id}"


def validate_interval(interval_s):
    """Raise ValidationError unless `interval_s` is a whole number of seconds within the limits."""
    low, high = conf.min_interval_s(), conf.max_interval_s()
    if isinstance(interval_s, bool) or not isinstance(interval_s, int):
        raise ValidationError(gettext_lazy("Choose how often to check."), code="interval")
    if interval_s < low:
        raise ValidationError(
            gettext_lazy("Checks can be at most every %(interval)s."), code="interval_short",
            params={"interval": describe_interval(low)})
    if interval_s > high:
        raise ValidationError(
            gettext_lazy("Checks must be at least every %(interval)s."), code="interval_long",
            params={"interval": describe_interval(high)})


# --- A user's actions ---------------------------------------------------------------

def subscribe(owner, url, *, fmt=Format.BEST, interval_s):
    """Follow a playlist or channel and check it at once. Raises InvalidURL / ValidationError
    (a hostile or malformed address, a bad format or interval, a duplicate, too many);
    nothing is written then."""
    normalised = validate_url(url)
    if fmt not in Format.values:
        raise ValidationError(gettext_lazy("Choose one of the offered formats."), code="format")
    validate_interval(interval_s)
    with transaction.atomic():
        # Two tabs must not both pass the per-user cap or the duplicate check.
        downloads.lock_owner(owner)
        mine = Subscription.objects.filter(owner=owner)
        if mine.filter(url_digest=digest(normalised), format=fmt).exists():
            raise ValidationError(
                gettext_lazy("You already follow this address in this format."), code="duplicate")
        limit = conf.max_per_user()
        if mine.count() >= limit:
            raise ValidationError(
                gettext_lazy("You already have %(n)d subscriptions; remove one to add another."),
                code="too_many", params={"n": limit})
        subscription = Subscription.objects.create(
            owner=owner, url=normalised, url_digest=digest(normalised), format=fmt,
            interval_s=interval_s,
            next_check_at=timezone.now() + timedelta(seconds=interval_s))  # the first is now
        _enqueue_check(subscription, priority=ASKED_PRIORITY)
    subscription.refresh_from_db()
    return subscription


def pause(sub):
    """Stop checking; a queued check is cancelled, a running one stops before its next request."""
    with transaction.atomic():
        Subscription.objects.filter(pk=sub.pk).update(paused=True)
        _cancel_queued_check(sub)
    sub.refresh_from_db()


def resume(sub):
    """Check again; a subscription whose check time passed while paused is checked at the next
    tick of the schedule, the others keep their time."""
    Subscription.objects.filter(pk=sub.pk).update(paused=False)
    sub.refresh_from_db()


def remove(sub):
    """Delete the subscription and what it remembers; the downloads it requested stay."""
    with transaction.atomic():
        _cancel_queued_check(sub)
        Subscription.objects.filter(pk=sub.pk).delete()


def check_now(sub):
    """Check an active subscription now (returns the check job: the live one if there is one,
    raised to the front). The next scheduled check then comes one interval later."""
    if sub.paused:
        raise IllegalTransition(_("Resume this subscription to check it."))
    with transaction.atomic():
        Subscription.objects.filter(pk=sub.pk).update(
            next_check_at=timezone.now() + timedelta(seconds=sub.interval_s))
        job = _enqueue_check(sub, priority=ASKED_PRIORITY)
    sub.refresh_from_db()
    return job


# --- The schedule -----------------------------------------------------------------------

def check_if_due(subscription_id, planned_at, interval_s, *, now):
    """Enqueue the scheduled check planned for `planned_at`; True when a new check was queued.

    The compare-and-set on next_check_at decides which of several schedulers
    (on several machines, or a retried call) owns this round: the others
    match no row. The job is enqueued in the same transaction, so a round is
    never spent without its check. A check still queued or running from an
    earlier round is left alone (the round is skipped, not doubled).
    """
    following = planned_at + timedelta(seconds=interval_s)
    if following <= now:
        following = now + timedelta(seconds=interval_s)  # after downtime: one check, not a burst
    with transaction.atomic():
        won = Subscription.objects.filter(
            pk=subscription_id, paused=False, next_check_at=planned_at,
        ).update(next_check_at=following)
        if not won:
            return False
        if Job.objects.filter(unique_key=check_key(subscription_id),
                              status__in=LIVE_STATUSES).exists():
            return False
        sub = Subscription.objects.select_related("owner").get(pk=subscription_id)
        _enqueue_check(sub, priority=SCHEDULED_PRIORITY)
    return True


def _enqueue_check(sub, *, priority):
    """Queue the check (or promote the live one: the unique key merges them)."""
    job = jobs.enqueue(CHECK_KIND, {"subscription": str(sub.pk)}, owner=sub.owner,
                       priority=priority)
    Subscription.objects.filter(pk=sub.pk).update(check_job=job)
    return job


def _cancel_queued_check(sub):
    job = Job.objects.filter(unique_key=check_key(sub.pk),
                             status__in=[JobStatus.READY, JobStatus.PAUSED]).first()
    if job is not None:
        try:
            jobs.cancel(job, reason="The subscription was paused or removed.")
        except IllegalTransition:
            pass  # a worker took it meanwhile: it sees the pause itself


# --- What a check found -------------------------------------------------------------

def record_result(subscription_id, *, listed, new, requested, left):
    """A check read the listing: remember what it found and clear the last error."""
    Subscription.objects.filter(pk=subscription_id).update(
        last_checked_at=Now(), last_outcome=Outcome.OK, last_listed=listed, last_new=new,
        last_requested=requested, last_left=left, last_error_code="", last_error="")


def record_failure(subscription_id, *, code, detail):
    """A check could not read the listing; the subscription stays as it was (active or not)."""
    Subscription.objects.filter(pk=subscription_id).update(
        last_checked_at=Now(), last_outcome=Outcome.FAILED, last_listed=0, last_new=0,
        last_requested=0, last_left=0, last_error_code=code[:50], last_error=str(detail))


def record_job_failure(job):
    """A check job failed for good: record why on its subscription (the kind's `finished` hook).

    The handler records the errors it raises itself; this catches the ends
    only the engine sees (stalled, timed out, crashed child).
    """
    subscription_id = (job.payload or {}).get("subscription")
    if job.kind == CHECK_KIND and job.status == JobStatus.FAILED and subscription_id:
        record_failure(subscription_id, code=job.error_code or "error", detail=job.error or "")
