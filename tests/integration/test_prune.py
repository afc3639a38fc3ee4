"""Pruning history: only finished jobs past the age, in batches, events with them."""

import threading
from datetime import timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import models
from django.utils import timezone

from jobs import conf, services
from jobs.maintenance import prune
from jobs.models import Job, JobEvent, JobStatus, Outcome
from tests.connections import other_connection

pytestmark = pytest.mark.django_db


def job(status, *, finished_days_ago=None, enqueued_days_ago=60):
    row = services.enqueue("tests.noop", {})
    now = timezone.now()
    Job.objects.filter(pk=row.pk).update(
        status=status,
        enqueued_at=now - timedelta(days=enqueued_days_ago),
        finished_at=None if finished_days_ago is None else now - timedelta(days=finished_days_ago),
    )
    JobEvent.objects.create(job_id=row.pk, kind=Outcome.FAILED, reason="for the timeline")
    return row.pk


@pytest.mark.parametrize("text,seconds", [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400),
                                          ("45s", 45), ("2w", 14 * 86400), (" 1.5H ", 5400)])
def test_ages_read_as_durations(text, seconds):
    assert conf.parse_age(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "d", "30 days", "-1d", "1y"])
def test_other_ages_are_refused(text):
    with pytest.raises(ValueError):
        conf.parse_age(text)


def test_only_finished_jobs_past_the_age_go_with_their_events():
    old = [job(s, finished_days_ago=40) for s in
           (JobStatus.SUCCESSFUL, JobStatus.FAILED, JobStatus.CANCELLED)]
    recent = job(JobStatus.SUCCESSFUL, finished_days_ago=5)
    # Live jobs stay whatever their timestamps say (a finished_at left from an
    # earlier run must not make a requeued job prunable).
    live = [job(s, finished_days_ago=40) for s in
            (JobStatus.READY, JobStatus.RUNNING, JobStatus.PAUSED)]
    result = prune.prune_finished(timedelta(days=30))
    assert (result.jobs, result.events) == (3, 3)
    assert set(Job.objects.values_list("pk", flat=True)) == {recent, *live}
    assert not JobEvent.objects.filter(job_id__in=old).exists()
    assert JobEvent.objects.filter(job_id__in=[recent, *live]).count() == 4


def test_a_failed_job_of_a_kind_with_a_cooldown_is_pruned_once_past_the_age():
    from jobs.engine import registry
    from jobs.runtime.worker import Worker

    registry.register("tests.cooling", lambda ctx, payload: None, cooldown_s=1800,
                      unique_key=lambda payload, owner: "cooling")
    try:
        row = services.enqueue("tests.cooling", {})
        Job.objects.filter(pk=row.pk).update(status=JobStatus.FAILED,
                                             finished_at=timezone.now() - timedelta(days=40))
        # The reaper leaves it given up: nothing refreshes its finished_at...
        Worker().reap()
        assert Job.objects.get(pk=row.pk).status == JobStatus.FAILED
        # ...so the history pruning removes it like any other old job.
        assert prune.prune_finished(timedelta(days=30)).jobs == 1
        assert not Job.objects.filter(pk=row.pk).exists()
    finally:
        registry.unregister("tests.cooling")


def test_pruning_goes_in_batches_oldest_first():
    ids = [job(JobStatus.SUCCESSFUL, finished_days_ago=40 + i) for i in range(5)]
    result = prune.prune_finished(timedelta(days=30), batch_size=2)
    assert (result.jobs, result.batches) == (5, 3)
    assert not Job.objects.filter(pk__in=ids).exists()
    assert prune.prune_finished(timedelta(days=30), batch_size=2).batches == 0


def test_a_foreign_key_that_would_cascade_is_refused(monkeypatch):
    assert prune.unsafe_relations() == []  # today only JobEvent points at jobs, and cascades
    pk = job(JobStatus.SUCCESSFUL, finished_days_ago=40)
    fake = SimpleNamespace(related_model=Job, on_delete=models.CASCADE,
                           field=SimpleNamespace(name="job"))
    relations = [*Job._meta.related_objects, fake]
    monkeypatch.setattr(Job._meta, "related_objects", relations)
    assert prune.unsafe_relations() == ["jobs.Job.job"]
    with pytest.raises(ImproperlyConfigured, match="on_delete=models.SET_NULL"):
        prune.prune_finished(timedelta(days=1))
    assert Job.objects.filter(pk=pk).exists()


def test_the_command_takes_an_age_or_the_setting(settings):
    young = job(JobStatus.FAILED, finished_days_ago=0.25)  # 6 hours
    old = job(JobStatus.FAILED, finished_days_ago=2)
    out = StringIO()
    call_command("prunejobs", stdout=out)  # default 30d: nothing that young
    assert Job.objects.count() == 2
    settings.JOBS_PRUNE_AFTER = "1d"
    call_command("prunejobs", stdout=out)
    assert list(Job.objects.values_list("pk", flat=True)) == [young]
    call_command("prunejobs", "--older-than", "90m", stdout=out)
    assert not Job.objects.exists()
    assert "Deleted 1 finished job(s)" in out.getvalue()
    assert old not in Job.objects.values_list("pk", flat=True)


@pytest.mark.parametrize("args,env", [(["--older-than", "soon"], None), ([], "forever"),
                                      (["--batch-size", "0"], None)])
def test_the_command_refuses_what_it_cannot_read(settings, args, env):
    if env:
        settings.JOBS_PRUNE_AFTER = env
    with pytest.raises(CommandError):
        call_command("prunejobs", *args, stdout=StringIO())


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_row_someone_holds_is_skipped_not_waited_for():
    held = job(JobStatus.FAILED, finished_days_ago=40)
    free = job(JobStatus.FAILED, finished_days_ago=41)
    locked, release = threading.Event(), threading.Event()

    def hold():
        with other_connection() as other:  # a retry in progress, say
            other.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [held])
            locked.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert locked.wait(10)
        result = prune.prune_finished(timedelta(days=30))
    finally:
        release.set()
        thread.join(10)
    assert result.jobs == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [held]
    assert free not in Job.objects.values_list("pk", flat=True)
