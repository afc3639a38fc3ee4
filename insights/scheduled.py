"""The insights' scheduled function, fired by a django-q2 schedule (see jobs/scheduler.py)."""

from jobs import services


def backfill_overviews():
    """Queue the daily overview backfill; one still queued or running absorbs the firing."""
    return str(services.enqueue("insights.backfill").pk)
