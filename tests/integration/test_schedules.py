"""Scheduled functions enqueue Haulage jobs; the default schedules exist once and run real work."""

import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import Schedule

from insights import scheduled as insight_schedules
from insights.models import Insight, InsightKind
from jobs import scheduled as job_schedules
from jobs import services
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)

defaults = importlib.import_module("core.migrations.0002_default_schedules")


def test_the_default_schedules_are_made_once_and_name_real_functions():
    Schedule.objects.all().delete()
    defaults.create(apps, None)
    defaults.create(apps, None)  # again, as a re-run would: no second copy
    schedules = list(Schedule.objects.order_by("name"))
    assert [s.name for s in schedules] == [
        "Check subscriptions", "Insight backfill", "Prune job history", "Storage housekeeping"]
    for schedule in schedules:
        assert callable(import_string(schedule.func)), schedule.func
        assert schedule.repeats == -1 and schedule.next_run is not None

    # Staff may rename or disable one; it is still not made again.
    Schedule.objects.filter(func="jobs.scheduled.prune_history").update(name="Nightly prune",
                                                                       repeats=0)
    defaults.create(apps, None)
    assert Schedule.objects.filter(func="jobs.scheduled.prune_history").count() == 1

    defaults.remove(apps, None)
    assert not Schedule.objects.exists()


def test_a_prune_firing_queues_one_job_which_prunes_old_history(run_worker):
    old = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=old.pk).update(status=JobStatus.SUCCESSFUL,
                                         finished_at=timezone.now() - timedelta(days=40))
    first = job_schedules.prune_history()
    assert job_schedules.prune_history() == first  # a second firing (another machine) joins it
    assert Job.objects.filter(kind="jobs.prune").count() == 1

    run_worker(kinds=["jobs.prune"])
    prune_job = Job.objects.get(kind="jobs.prune")
    assert prune_job.status == JobStatus.SUCCESSFUL
    assert prune_job.result["jobs"] == 1
    assert not Job.objects.filter(pk=old.pk).exists()


def test_the_backfill_asks_for_active_users_overviews_at_prefetch_priority(run_worker):
    users = get_user_model().objects
    active = users.create_user("active", last_login=timezone.now() - timedelta(days=2))
    users.create_user("dormant", last_login=timezone.now() - timedelta(days=90))
    users.create_user("never")
    insight_schedules.backfill_overviews()
    insight_schedules.backfill_overviews()
    assert Job.objects.filter(kind="insights.backfill").count() == 1

    run_worker(kinds=["insights.backfill"])
    backfill = Job.objects.get(kind="insights.backfill")
    assert backfill.status == JobStatus.SUCCESSFUL, backfill.errors
    assert backfill.result == {"users": 1, "requested": 1}
    overview = Insight.objects.get()
    assert (overview.owner, overview.kind) == (active, InsightKind.LIBRARY_OVERVIEW)
    generation = Job.objects.get(pk=overview.job_id)
    assert generation.priority < 0 and generation.status == JobStatus.READY  # prefetch tier

    # The next day's firing, with nothing changed, queues nothing new for that user.
    Job.objects.filter(pk=generation.pk).update(status=JobStatus.SUCCESSFUL)
    Insight.objects.filter(pk=overview.pk).update(generated_at=timezone.now(),
                                                  fingerprint=generation.fingerprint)
    insight_schedules.backfill_overviews()
    run_worker(kinds=["insights.backfill"])
    assert Job.objects.filter(kind="insights.library_overview").count() == 1


def test_staff_see_and_disable_schedules_in_the_admin(client, staff_user):
    Schedule.objects.all().delete()
    defaults.create(apps, None)
    client.force_login(staff_user)
    listing = client.get("/admin/django_q/schedule/")
    assert listing.status_code == 200
    assert "Storage housekeeping" in listing.content.decode()

    housekeeping = Schedule.objects.get(func="downloads.scheduled.housekeeping")
    url = f"/admin/django_q/schedule/{housekeeping.pk}/change/"
    form = client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.update(repeats=0, next_run_0=housekeeping.next_run.strftime("%Y-%m-%d"),
                next_run_1=housekeeping.next_run.strftime("%H:%M:%S"))
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    housekeeping.refresh_from_db()
    assert housekeeping.repeats == 0  # disabled: django-q2 never fires it again
