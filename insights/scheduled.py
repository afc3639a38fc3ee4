"""The insights' scheduled function, fired by a django-q2 schedule (see jobs/runtime/scheduler.py)."""

from django.utils.translation import gettext_lazy as _

from jobs import schedules, services


@schedules.schedulable(_("Insight backfill"))
def backfill_overviews():
    """Queue the daily overview backfill; one still queued or running absorbs the firing."""
    return str(services.enqueue("insights.backfill").pk)
