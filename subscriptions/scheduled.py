"""What the schedules fire (registered with jobs/schedules.py; keep them short)."""

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from jobs import schedules
from subscriptions import conf, services
from subscriptions.models import Subscription


@schedules.schedulable(_("Check subscriptions"))
def check_due():
    """Enqueue a check of every active subscription whose check time has come; returns how many.

    Safe to call often and from several machines at once: each round of a
    subscription is taken by one compare-and-set (see services.check_if_due),
    and a check still queued or running is never doubled.
    """
    now = timezone.now()
    due = (Subscription.objects.due(now).order_by("next_check_at")
           .values_list("pk", "next_check_at", "interval_s")[:conf.due_batch()])
    return sum(services.check_if_due(pk, planned_at, interval_s, now=now)
               for pk, planned_at, interval_s in due)
