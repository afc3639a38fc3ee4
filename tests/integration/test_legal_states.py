"""One table says where each verb may act (jobs/engine/actions.py LEGAL), and every reader obeys it:
the services, the admin's actions and its "all matching" view, and the `jobs` command."""

import io

import pytest
from django.core.management import call_command

from jobs import services
from jobs.admin import jobs as jobs_admin
from jobs.exceptions import IllegalTransition
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db

ONE_JOB = {
    "move_to_front": services.move_to_front,
    "move_up": services.move_up,
    "move_down": services.move_down,
    "set_priority_tier": lambda job: services.set_priority_tier(job, 1),
    "cancel": services.cancel,
    "pause": services.pause,
    "resume": services.resume,
    "retry": services.retry,
}
MATCHING = {"retry_matching": services.retry_matching, "cancel_matching": services.cancel_matching}


def job_in(status):
    job = services.enqueue("tests.noop", {})
    Job.objects.filter(pk=job.pk).update(status=status)
    return Job.objects.get(pk=job.pk)


def test_the_table_names_every_verb_and_only_states_that_exist():
    assert set(services.LEGAL) == set(ONE_JOB) | set(MATCHING)
    for states in services.LEGAL.values():
        assert states and set(states) <= set(JobStatus)


@pytest.mark.parametrize("status", list(JobStatus))
@pytest.mark.parametrize("verb", sorted(ONE_JOB))
def test_a_verb_acts_exactly_in_the_states_the_table_allows(verb, status):
    job = job_in(status)
    if status in services.LEGAL[verb]:
        ONE_JOB[verb](job)  # no refusal (a move may find the job already in place)
    else:
        with pytest.raises(IllegalTransition):
            ONE_JOB[verb](job)
        assert Job.objects.get(pk=job.pk).status == status


@pytest.mark.parametrize("verb", sorted(MATCHING))
def test_a_bulk_verb_takes_exactly_the_states_the_table_allows(verb):
    by_status = {status: job_in(status).pk for status in JobStatus}
    done, skipped = MATCHING[verb](Job.objects.all())
    assert (done, skipped) == (len(services.LEGAL[verb]), 0)
    for status, pk in by_status.items():
        moved = Job.objects.get(pk=pk).status != status or Job.objects.get(pk=pk).stop_requested
        assert bool(moved) == (status in services.LEGAL[verb]), status


def test_bulk_retry_leaves_cancelled_jobs_alone_while_a_single_retry_takes_them():
    assert JobStatus.CANCELLED in services.LEGAL["retry"]
    assert JobStatus.CANCELLED not in services.LEGAL["retry_matching"]
    cancelled = job_in(JobStatus.CANCELLED)
    assert services.retry_matching(Job.objects.all()) == (0, 0)
    services.retry(cancelled)
    assert Job.objects.get(pk=cancelled.pk).status == JobStatus.READY


def test_the_admin_offers_each_action_where_the_table_allows_it():
    for name, action in jobs_admin.ACTIONS.items():
        assert tuple(action.legal) == tuple(services.LEGAL[name]), name
    for name, (states, service) in jobs_admin.JobAdmin.MATCHING.items():
        assert tuple(states) == tuple(services.LEGAL[f"{name}_matching"]), name
        assert service is getattr(services, f"{name}_matching")


def test_the_commands_dry_run_counts_what_the_bulk_verb_would_take():
    for status in JobStatus:
        job_in(status)
    for action in ("retry", "cancel"):
        out = io.StringIO()
        call_command("jobs", action, "--all", "--dry-run", stdout=out)
        assert f"Would {action} {len(services.LEGAL[f'{action}_matching'])} job(s)" in out.getvalue()
