"""`manage.py jobs` against a real database: status, show, retry and cancel, as tables and JSON."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobEvent, JobStatus, Queue, Worker

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def queue_state(user):
    services.set_queue("other", paused=True, concurrency=2, gap_seconds=1.5)
    waiting = services.enqueue("tests.noop", {"video": {"id": 42}}, owner=user)
    Job.objects.filter(pk=waiting.pk).update(run_after=timezone.now() - timedelta(seconds=90))
    failed = [services.enqueue("tests.noop", {"n": n}) for n in range(3)]
    Job.objects.filter(pk__in=[j.pk for j in failed]).update(
        status=JobStatus.FAILED, error_code="network", error="reset", finished_at=timezone.now())
    Job.objects.filter(pk=failed[0].pk).update(error_code="bad_input")
    services.enqueue("tests.other_queue", {})
    Worker.objects.create(name="box-1", host="box", pid=7, queues=["default"],
                          heartbeat_at=timezone.now() - timedelta(seconds=12))
    return {"waiting": waiting, "failed": failed}


def test_status_as_a_table_and_as_json(queue_state):
    table = run("status").splitlines()
    assert table[0].split()[:7] == ["QUEUE", "READY", "RUNNING", "PAUSED", "SUCCESSFUL", "FAILED",
                                    "CANCELLED"]
    default = next(line.split() for line in table if line.startswith("default "))
    assert default[1:7] == ["1", "0", "0", "0", "3", "0"] and default[8] == "no"
    assert 90 <= int(default[7].rstrip("s")) < 150
    other = next(line.split() for line in table if line.startswith("other "))
    assert other[8:] == ["yes", "2", "1.5s"]
    worker = next(line for line in table if line.startswith("box-1"))
    assert "12s ago" in worker or "13s ago" in worker

    document = json.loads(run("status", "--json"))
    queues = {q["queue"]: q for q in document["queues"]}
    assert queues["default"]["jobs"]["failed"] == 3 and queues["default"]["jobs"]["ready"] == 1
    assert queues["other"]["paused"] is True and queues["other"]["concurrency"] == 2
    assert [w["worker"] for w in document["workers"]] == ["box-1"]
    assert document["workers"][0]["heartbeat_age_s"] >= 12


def test_show_gives_what_the_job_page_shows(queue_state, user):
    job = queue_state["waiting"]
    text = run("show", str(job.pk))
    assert any(line.split() == ["id", str(job.pk)] for line in text.splitlines())
    assert "tests.noop" in text and "alice" in text
    assert "Timeline:" in text and "enqueued" in text
    document = json.loads(run("show", str(job.public_id), "--json"))
    assert document["id"] == job.pk and document["owner"] == "alice"
    assert document["payload"] == {"video": {"id": 42}} and document["position"] == 1
    assert document["timeline"][0]["what"] == "enqueued"
    with pytest.raises(CommandError, match="No job"):
        run("show", "123456789")
    with pytest.raises(CommandError, match="No job"):
        run("show", "not-a-number")


def test_show_gives_the_workflow_and_the_rate_key(db):
    parent = services.enqueue("tests.noop", {"step": 1})
    child = services.enqueue("tests.noop", {"step": 2}, depends_on=[parent], rate_key="site:example.com",
                             on_dependency_failure="run")
    document = json.loads(run("show", str(child.pk), "--json"))
    assert document["parents"] == [{"id": parent.pk, "kind": "tests.noop", "status": "READY"}]
    assert (document["rate_key"], document["on_dependency_failure"]) == ("site:example.com", "run")
    assert json.loads(run("show", str(parent.pk), "--json"))["children"][0]["id"] == child.pk
    text = run("show", str(parent.pk))
    assert "Waited for by:" in text and any(line.split()[:2] == [str(child.pk), "tests.noop"]
                                            for line in text.splitlines() if line.strip())


def test_retry_with_filters_a_dry_run_first(queue_state):
    failed = queue_state["failed"]
    dry = json.loads(run("retry", "--error-code", "network", "--dry-run", "--json"))
    assert dry["matching"] == 2 and sorted(j["id"] for j in dry["jobs"]) == sorted(j.pk for j in failed[1:])
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3  # nothing changed
    table = run("retry", "--error-code", "network", "--dry-run")
    assert table.splitlines()[0].split() == ["ID", "KIND", "QUEUE", "STATUS", "ERROR_CODE", "ENQUEUED"]
    assert "Would retry 2 job(s); nothing was changed." in table

    done = run("retry", "--error-code", "network", "--reason", "link back")
    assert "Retried: 2 job(s)" in done
    assert Job.objects.get(pk=failed[0].pk).status == JobStatus.FAILED
    assert Job.objects.filter(pk__in=[j.pk for j in failed[1:]], status=JobStatus.READY).count() == 2
    assert JobEvent.objects.filter(kind="retried", reason="link back").count() == 2


def test_cancel_with_filters_and_json(queue_state):
    old = services.enqueue("tests.noop", {"old": True})
    Job.objects.filter(pk=old.pk).update(enqueued_at=timezone.now() - timedelta(hours=3))
    document = json.loads(run("cancel", "--kind", "tests.noop", "--older-than", "2h", "--json"))
    assert document == {"action": "cancel", "dry_run": False, "changed": 1, "skipped": 0,
                        "filters": {"kind": "tests.noop", "older_than": "7200s"}}
    assert Job.objects.get(pk=old.pk).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=queue_state["waiting"].pk).status == JobStatus.READY
    document = json.loads(run("cancel", "--payload", "video.id=42", "--json"))
    assert document["changed"] == 1
    assert Job.objects.get(pk=queue_state["waiting"].pk).status == JobStatus.CANCELLED


@pytest.mark.parametrize(("args", "said"), [
    (["cancel"], "at least one filter"),
    (["retry", "--older-than", "soon"], "not an age"),
    (["retry", "--older-than", "99999999999999999999d"], "longer ago than any job"),
    (["retry", "--since", "2024-02-30"], "not a date"),
    (["cancel", "--payload", "novalue"], "key=value"),
    (["cancel", "--state", "gone"], "not a state"),
])
def test_bad_input_is_a_sentence_not_a_traceback(queue_state, args, said):
    with pytest.raises(CommandError, match=said):
        run(*args)
    assert not Job.objects.filter(status=JobStatus.CANCELLED).exists()
    assert Queue.objects.filter(name="other", paused=True).exists()
