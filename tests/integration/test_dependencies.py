"""Workflows: a dependent starts only after every parent is SUCCESSFUL, decided in the parent's commit."""

import threading

import pytest
from django.db import connection, transaction
from django.tasks import TaskResultStatus

from jobs import services
from jobs.engine import claiming, dependencies, outcome
from jobs.maintenance import reaper
from jobs.models import Job, JobDependency, JobStatus, Outcome, Worker
from jobs.selectors import standing as selectors
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def claim(limit=10):
    worker = Worker.objects.create(name=f"w{Worker.objects.count()}", host="h", pid=1)
    return claiming.claim(worker, queues=["default"], kinds=["tests.chain", "tests.noop"],
                          limit=limit)


def step(ledger, name, **options):
    return services.enqueue("tests.chain", {"ledger": str(ledger), "name": name,
                                            "fail": options.pop("fail", False)}, **options)


def finish(job, how=Outcome.SUCCEEDED):
    assert outcome.record(job, how, error="on purpose")


def fresh(job):
    return Job.objects.get(pk=job.pk)


def steps(ledger):
    return [line.split() for line in ledger.read_text().splitlines()] if ledger.exists() else []


def test_a_dependent_is_never_claimed_before_every_parent_is_successful(tmp_path):
    ledger = tmp_path / "ledger"
    first, second = step(ledger, "first"), step(ledger, "second")
    child = step(ledger, "child", depends_on=[first, second.pk])
    assert fresh(child).blocked_key == "@parents"
    assert fresh(first).has_dependents and fresh(second).has_dependents
    running = {job.pk: job for job in claim()}
    assert set(running) == {first.pk, second.pk}  # not the child
    finish(running[first.pk])
    assert fresh(child).blocked_key == "@parents" and claim() == []
    standing = selectors.standing(fresh(child), served_kinds={"tests.chain"})
    assert (standing.reason, standing.message) == ("waiting_for_parents",
                                                   "Waiting for 1 earlier job to finish.")
    finish(running[second.pk])  # the last parent's commit decides the child
    assert fresh(child).blocked_key is None
    assert [job.pk for job in claim()] == [child.pk]


def test_a_worker_runs_a_chain_in_order(tmp_path, run_worker):
    ledger = tmp_path / "ledger"
    first = step(ledger, "first")
    second = step(ledger, "second", depends_on=[first])
    step(ledger, "third", depends_on=[second])
    run_worker(concurrency=4)
    assert [(line[1], line[3]) for line in steps(ledger)] == [
        ("first", "-"), ("second", "SUCCESSFUL"), ("third", "SUCCESSFUL")]
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCESSFUL}


def test_a_failed_parent_cancels_its_dependents_and_theirs(tmp_path, run_worker):
    ledger = tmp_path / "ledger"
    parent = step(ledger, "parent", fail=True)
    child = step(ledger, "child", depends_on=[parent])
    grandchild = step(ledger, "grandchild", depends_on=[child])
    run_worker(concurrency=4)
    assert fresh(parent).status == JobStatus.FAILED
    for job in (child, grandchild):
        job = fresh(job)
        assert (job.status, job.error_code, job.attempts) == (
            JobStatus.CANCELLED, "dependency_failed", 0)
    assert [line[1] for line in steps(ledger)] == ["parent"]  # neither ever ran


def test_a_cancelled_parent_cancels_its_dependents(tmp_path):
    ledger = tmp_path / "ledger"
    parent = step(ledger, "parent")
    child = step(ledger, "child", depends_on=[parent])
    services.cancel(parent)
    assert (fresh(child).status, fresh(child).error_code) == (JobStatus.CANCELLED,
                                                              "dependency_failed")


def test_on_dependency_failure_run_runs_it_anyway(tmp_path, run_worker):
    ledger = tmp_path / "ledger"
    parent = step(ledger, "parent", fail=True)
    ok = step(ledger, "ok")
    child = step(ledger, "child", depends_on=[parent, ok], on_dependency_failure="run")
    run_worker(concurrency=4)
    assert fresh(child).status == JobStatus.SUCCESSFUL
    ran = {line[1]: line[3] for line in steps(ledger)}
    assert sorted(ran["child"].split(",")) == ["FAILED", "SUCCESSFUL"]  # after both ended


def test_a_dependent_of_finished_parents_is_decided_at_once(tmp_path):
    ledger = tmp_path / "ledger"
    done, failed = step(ledger, "done"), step(ledger, "failed")
    running = {job.pk: job for job in claim()}
    finish(running[done.pk])
    finish(running[failed.pk], Outcome.FAILED)
    after_done = step(ledger, "after_done", depends_on=[done])
    after_failed = step(ledger, "after_failed", depends_on=[failed])
    assert fresh(after_done).blocked_key is None and fresh(after_done).status == JobStatus.READY
    assert (after_failed.status, after_failed.error_code) == (JobStatus.CANCELLED,
                                                              "dependency_failed")


def test_depends_on_names_jobs_that_exist(tmp_path):
    with pytest.raises(ValueError, match="No job has the id"):
        step(tmp_path / "l", "orphan", depends_on=[987654])
    with pytest.raises(ValueError, match="No job has the id"):
        step(tmp_path / "l", "orphan", depends_on=["8c7d2f7e-51a4-4b8e-9a8e-0a3f1b2c3d4e"])
    with pytest.raises(ValueError, match="depends_on takes"):
        step(tmp_path / "l", "orphan", depends_on=["not an id"])
    with pytest.raises(ValueError, match="on_dependency_failure"):
        step(tmp_path / "l", "orphan", on_dependency_failure="maybe")
    assert not Job.objects.exists()


def test_a_resumed_dependent_waits_again_for_its_live_parents(tmp_path):
    ledger = tmp_path / "ledger"
    parent = step(ledger, "parent")
    child = step(ledger, "child", depends_on=[parent])
    services.pause(child)
    services.resume(child)
    assert fresh(child).blocked_key == "@parents"
    assert [job.pk for job in claim()] == [parent.pk]


def test_the_reaper_decides_dependents_whose_parents_all_ended(tmp_path):
    ledger = tmp_path / "ledger"
    parent = step(ledger, "parent")
    child = step(ledger, "child", depends_on=[parent])
    # A parent ended without its transition deciding (a row written by hand).
    Job.objects.filter(pk=parent.pk).update(status=JobStatus.SUCCESSFUL, has_dependents=False)
    reaper.reap()
    assert fresh(child).blocked_key is None


@pytest.mark.postgres
def test_a_parent_finishing_while_its_child_is_linked_is_not_missed(tmp_path):
    ledger = tmp_path / "ledger"
    parent = step(ledger, "parent")
    [running] = claim()
    linked, go = threading.Event(), threading.Event()
    children = []

    def link():
        try:
            with transaction.atomic():
                children.append(step(ledger, "child", depends_on=[parent]))
                linked.set()
                go.wait(10)  # the parent's completion waits for this commit
        finally:
            connection.close()

    thread = threading.Thread(target=link)
    thread.start()
    assert linked.wait(10)
    finisher = threading.Thread(target=lambda: (finish(running), connection.close()))
    finisher.start()
    finisher.join(0.5)
    assert finisher.is_alive()  # held by the link's lock on the parent
    go.set()
    thread.join(10)
    finisher.join(10)
    assert fresh(parent).status == JobStatus.SUCCESSFUL
    assert fresh(children[0]).blocked_key is None  # decided in the parent's commit


def test_tasks_api_depends_on_task_results(run_worker):
    first = tasks.add.enqueue(1, 2)
    second = tasks.add.with_job_options(depends_on=[first]).enqueue(3, 4)
    third = tasks.add.with_job_options(depends_on=[second.id], on_dependency_failure="run") \
        .enqueue(5, 6)
    assert Job.objects.get(public_id=second.id).blocked_key == "@parents"
    run_worker()
    results = [tasks.add.get_result(r.id) for r in (first, second, third)]
    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 3
    assert [r.return_value for r in results] == [3, 7, 11]
    assert results[0].finished_at <= results[1].started_at
    assert results[1].finished_at <= results[2].started_at
    assert JobDependency.objects.count() == 2


def test_parents_and_dependents_read_both_ways(tmp_path):
    parent = step(tmp_path / "l", "parent")
    child = step(tmp_path / "l", "child", depends_on=[parent])
    assert list(dependencies.dependents_of(parent)) == [fresh(child)]
    assert list(dependencies.parents_of(child)) == [fresh(parent)]


def test_the_admin_job_page_shows_its_parents_and_children(tmp_path, admin_client):
    parent = step(tmp_path / "l", "parent")
    child = step(tmp_path / "l", "child", depends_on=[parent])
    page = admin_client.get(f"/admin/jobs/job/{child.pk}/change/").content.decode()
    assert 'id="workflow"' in page and f'href="/admin/jobs/job/{parent.pk}/change/"' in page
    page = admin_client.get(f"/admin/jobs/job/{parent.pk}/change/").content.decode()
    assert f'href="/admin/jobs/job/{child.pk}/change/"' in page
    assert "Waiting for 1 earlier job to finish." in admin_client.get(
        f"/admin/jobs/job/{child.pk}/change/").content.decode()
