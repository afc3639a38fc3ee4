"""Haulage's default schedules (django-q2), created once; staff edit or disable them afterwards.

A schedule is recognised by its function, so running this again (or after
staff renamed one) never makes a second copy.
"""

from datetime import datetime, time, timedelta

from django.db import migrations
from django.utils import timezone

MINUTES, HOURLY, DAILY = "I", "H", "D"  # django_q.models.Schedule's types

DEFAULTS = [
    # name, function, type, minutes, first run at (local time) or None for now
    ("Check subscriptions", "subscriptions.scheduled.check_due", MINUTES, 1, None),
    ("Storage housekeeping", "downloads.scheduled.housekeeping", HOURLY, None, None),
    ("Prune job history", "jobs.scheduled.prune_history", DAILY, None, time(3, 30)),
    ("Insight backfill", "insights.scheduled.backfill_overviews", DAILY, None, time(4, 30)),
]


def _first_run(at):
    now = timezone.localtime()
    if at is None:
        return now
    first = timezone.make_aware(datetime.combine(now.date(), at))
    return first if first > now else first + timedelta(days=1)


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, func, kind, minutes, at in DEFAULTS:
        if not Schedule.objects.filter(func=func).exists():
            Schedule.objects.create(name=name, func=func, schedule_type=kind, minutes=minutes,
                                    repeats=-1, next_run=_first_run(at))


def remove(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(func__in=[func for _, func, *_rest in DEFAULTS]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create, remove)]
