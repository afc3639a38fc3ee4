"""Failure notices: a webhook (a real HTTP server on loopback) and Django's mail outbox hear of
jobs that fail for good, one message per kind, error code and window, however many fail."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.core.checks import run_checks
from django.db import transaction

from jobs import notices, services
from jobs.models import FailureNotice, Job, JobStatus

pytestmark = pytest.mark.django_db(transaction=True)


class Hook(BaseHTTPRequestHandler):
    received = None  # [(path, document)], set per server
    answer = 204

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(self.server.answer)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.received, server.answer = [], 204
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/haulage"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def notify(settings, webhook):
    settings.JOBS_FAILURE_NOTIFY = [webhook.url, "ops@example.com", "oncall@example.com"]
    settings.JOBS_FAILURE_WEBHOOK_ALLOW = [f"127.0.0.1:{webhook.server_address[1]}"]  # a loopback hook
    settings.JOBS_FAILURE_NOTIFY_WINDOW_SECONDS = 3600
    settings.JOBS_SITE_URL = "https://haulage.example.com"
    return settings


def fail(n, kind="tests.fail_permanent"):
    return [services.enqueue(kind, {"n": i}) for i in range(n)]


def test_an_outage_sends_one_message_per_window_to_each_target(notify, webhook, run_worker, mailoutbox):
    first = fail(1)
    run_worker()
    assert len(webhook.received) == 1 and len(mailoutbox) == 1
    path, content_type, document = webhook.received[0]
    assert (path, content_type) == ("/hooks/haulage", "application/json")
    assert document == {
        "job_id": first[0].pk, "kind": "tests.fail_permanent", "queue": "default",
        "error": "the input can never work", "error_code": "bad_input", "attempts": 1,
        "admin_url": f"https://haulage.example.com/admin/jobs/job/{first[0].pk}/change/",
        "failed": 1, "since": document["since"],
    }
    message = mailoutbox[0]
    assert sorted(message.to) == ["oncall@example.com", "ops@example.com"]
    assert f"Job #{first[0].pk} (tests.fail_permanent) failed: bad_input" == message.subject
    assert document["admin_url"] in message.body

    # The outage goes on: forty more fail within the window. They wait for its end, as one message.
    more = fail(40)
    run_worker()
    assert len(webhook.received) == 1 and len(mailoutbox) == 1
    notice = Job.objects.filter(kind=notices.KIND, status=JobStatus.READY)
    assert notice.count() == 2  # one per target, not one per failure
    notice.update(run_after=Job.objects.get(pk=first[0].pk).finished_at)  # the window has passed
    run_worker()
    assert len(webhook.received) == 2 and len(mailoutbox) == 2
    document = webhook.received[1][2]
    # It names the last of them to fail (a worker fails them side by side, in no set order).
    assert document["failed"] == 40 and document["job_id"] in {job.pk for job in more}
    assert mailoutbox[1].subject == "40 jobs of tests.fail_permanent failed: bad_input"
    assert not Job.objects.filter(kind=notices.KIND).exclude(status=JobStatus.SUCCESSFUL).exists()
    assert set(FailureNotice.objects.values_list("pending", "scheduled")) == {(0, False)}


def test_another_error_code_or_kind_is_another_message(notify, webhook, run_worker):
    notify.JOBS_FAILURE_NOTIFY = [webhook.url]
    fail(2)
    fail(1, kind="tests.fail_value_error")  # retried once, then fails with code "error"
    run_worker()
    told = sorted((d["kind"], d["error_code"]) for _p, _c, d in webhook.received)
    assert told == [("tests.fail_permanent", "bad_input"), ("tests.fail_value_error", "error")]


def test_a_webhook_that_refuses_is_tried_again_and_the_worker_goes_on(notify, webhook, run_worker):
    notify.JOBS_FAILURE_NOTIFY = [webhook.url]
    webhook.answer = 503
    fail(1)
    ok = services.enqueue("tests.noop", {})
    run_worker()
    assert Job.objects.get(pk=ok.pk).status == JobStatus.SUCCESSFUL
    notice = Job.objects.get(kind=notices.KIND)
    assert notice.status == JobStatus.READY and notice.error_code == "webhook_refused"
    webhook.answer = 200
    Job.objects.filter(pk=notice.pk).update(run_after=notice.enqueued_at)
    run_worker()
    assert Job.objects.get(pk=notice.pk).status == JobStatus.SUCCESSFUL
    assert [d["failed"] for _p, _c, d in webhook.received] == [1, 1]  # the refused try, then the one that took


def test_a_failure_that_rolls_back_is_never_told(notify, webhook):
    job = fail(1)[0]
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, error_code="bad_input")
        notices.job_failed(Job.objects.get(pk=job.pk))
        raise RuntimeError("rolled back")
    assert not FailureNotice.objects.exists() and not Job.objects.filter(kind=notices.KIND).exists()


def test_without_the_setting_nothing_is_queued(settings, run_worker):
    settings.JOBS_FAILURE_NOTIFY = []
    fail(2)
    run_worker()
    assert not Job.objects.filter(kind=notices.KIND).exists()


@pytest.mark.parametrize("bad", ["ftp://files.example.com/x", "not an address", "http://"])
def test_a_bad_target_is_a_system_check_error(settings, bad):
    settings.JOBS_FAILURE_NOTIFY = ["ops@example.com", bad]
    errors = [e for e in run_checks() if e.id == "jobs.E004"]
    assert errors and repr(bad) in errors[0].msg


def test_nothing_is_told_about_a_notice_that_fails_itself(notify):
    job = services.enqueue(notices.KIND, {"notice": 999})
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)
    notices.job_failed(Job.objects.get(pk=job.pk))
    assert not FailureNotice.objects.exists()
    assert mail.outbox == []
