"""How failure notices leave the site: webhooks through the engine's egress guard (public
addresses only unless JOBS_FAILURE_WEBHOOK_ALLOW admits one, no redirect followed, one deadline
for the whole delivery), and mail through whichever backend EMAIL_BACKEND names, a warning in
the log when it cannot go. The webhooks are real HTTP servers on loopback."""

import json
import logging
import socket

import pytest
from django.core.checks import run_checks
from django.core.mail import mailers

from jobs import egress, services
from jobs.models import Job, JobStatus
from project import env
from tests.origin import Origin

pytestmark = pytest.mark.django_db(transaction=True)

KIND = "jobs.notify_failure"


class Hook(Origin):
    """An Origin that takes POSTs as it answers GETs (and records them with their body)."""

    def __init__(self):
        super().__init__()
        self.bodies = []

    def _handler_class(self):
        hook = self

        class Handler(super()._handler_class()):
            def do_POST(self):  # noqa: N802 - http.server's name
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self._answer(body=True)

        return Handler


@pytest.fixture
def hook():
    with Hook() as server:
        server.add_file("/hook", b"thanks", content_type="text/plain")
        yield server


@pytest.fixture
def elsewhere_hook():
    """A second loopback server nothing admits: it must never see a request."""
    with Hook() as server:
        server.add_file("/inside", b"secret", content_type="text/plain")
        yield server


@pytest.fixture
def notify(settings, hook):
    settings.JOBS_FAILURE_NOTIFY = [hook.url("/hook")]
    settings.JOBS_FAILURE_WEBHOOK_ALLOW = [f"127.0.0.1:{hook.port}"]
    return settings


def notice_after_a_failure(run_worker):
    services.enqueue("tests.fail_permanent", {})
    run_worker()
    return Job.objects.get(kind=KIND)


def test_an_allowed_loopback_webhook_is_delivered(notify, hook, run_worker):
    notice = notice_after_a_failure(run_worker)
    assert notice.status == JobStatus.SUCCESSFUL, notice.error
    assert [seen.method for seen in hook.requests_for("/hook")] == ["POST"]
    assert hook.bodies[0]["kind"] == "tests.fail_permanent"


def test_a_webhook_on_a_private_address_is_refused_before_connecting(notify, hook, run_worker, caplog):
    notify.JOBS_FAILURE_WEBHOOK_ALLOW = []
    with caplog.at_level(logging.WARNING, logger="jobs.notices"):
        notice = notice_after_a_failure(run_worker)
    assert notice.status == JobStatus.READY and notice.error_code == "webhook_blocked"
    assert "JOBS_FAILURE_WEBHOOK_ALLOW" in notice.error
    assert hook.saw_nothing()
    assert any("was not delivered" in r.getMessage() and "127.0.0.1" in r.getMessage()
               for r in caplog.records)


def test_a_redirect_to_loopback_is_not_followed(notify, hook, elsewhere_hook, run_worker):
    hook.add_redirect("/hook", elsewhere_hook.url("/inside"), status=307)
    notice = notice_after_a_failure(run_worker)
    assert notice.status == JobStatus.READY and notice.error_code == "webhook_redirected"
    assert elsewhere_hook.url("/inside") in notice.error
    assert [seen.method for seen in hook.requests_for("/hook")] == ["POST"]
    assert elsewhere_hook.saw_nothing()


def test_a_webhook_that_trickles_its_answer_is_cut_at_the_deadline(notify, hook, run_worker):
    # A byte every 50 ms: every read gets something, so only a deadline for the whole
    # delivery ends it (the answer would take ten minutes).
    hook.add_file("/hook", b"x" * 12_000, content_type="text/plain", throttle_bytes_s=20)
    notify.JOBS_FAILURE_WEBHOOK_TIMEOUT_SECONDS = 1
    notice = notice_after_a_failure(run_worker)
    assert notice.status == JobStatus.READY and notice.error_code == "webhook_timeout"
    assert "within 1 s" in notice.error


def test_a_name_is_checked_for_the_addresses_it_resolves_to(hook):
    public_only = egress.Policy()
    with pytest.raises(egress.Blocked, match="not a public address"):
        egress.post_json(f"http://localhost:{hook.port}/hook", b"{}", policy=public_only, deadline_s=5)
    assert hook.saw_nothing()
    allowed = egress.Policy.parse(f"127.0.0.1:{hook.port},[::1]:{hook.port}")
    assert egress.post_json(f"http://localhost:{hook.port}/hook", b"{}", policy=allowed,
                            deadline_s=5) == 200


def test_a_webhook_that_answers_nothing_is_cut_at_the_deadline():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the backlog), never answers
        port = silent.getsockname()[1]
        with pytest.raises(egress.TimedOut):
            egress.post_json(f"http://127.0.0.1:{port}/", b"{}", deadline_s=0.5,
                             policy=egress.Policy.parse(f"127.0.0.1:{port}"))


# --- Mail ---------------------------------------------------------------------------------


@pytest.fixture
def mail_notice(settings):
    settings.JOBS_FAILURE_NOTIFY = ["ops@example.com"]
    return settings


def mailer_of(monkeypatch, settings, backend, **environ):
    """MAILERS as project/settings.py makes it from the environment."""
    monkeypatch.setenv("EMAIL_BACKEND", backend)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    settings.MAILERS = {"default": env.get_mailer("EMAIL_BACKEND", file_path=settings.VAR_DIR / "mail")}
    return mailers.default


@pytest.mark.parametrize("backend", ["console", "django.core.mail.backends.console.EmailBackend"])
def test_the_console_backend_mails_notices(mail_notice, monkeypatch, backend, run_worker, capsys):
    mailer_of(monkeypatch, mail_notice, backend)
    notice = notice_after_a_failure(run_worker)
    assert notice.status == JobStatus.SUCCESSFUL, notice.error
    printed = capsys.readouterr().out
    assert "To: ops@example.com" in printed and "(tests.fail_permanent) failed: bad_input" in printed


def test_each_backend_spelling_builds_its_mailer(monkeypatch, settings, tmp_path):
    from django.core.mail.backends import console, filebased, locmem, smtp

    assert isinstance(mailer_of(monkeypatch, settings, "locmem"), locmem.EmailBackend)
    folder = tmp_path / "mail"
    file_mailer = mailer_of(monkeypatch, settings, "file", EMAIL_FILE_PATH=str(folder))
    assert isinstance(file_mailer, filebased.EmailBackend) and file_mailer.file_path == str(folder)
    assert type(mailer_of(monkeypatch, settings, "CONSOLE")) is console.EmailBackend
    smtp_mailer = mailer_of(monkeypatch, settings, "smtp", EMAIL_HOST="mail.example.com",
                            EMAIL_PORT="2525")
    assert isinstance(smtp_mailer, smtp.EmailBackend)
    assert (smtp_mailer.host, smtp_mailer.port) == ("mail.example.com", 2525)
    with pytest.raises(env.SettingsError, match="EMAIL_BACKEND must be one of smtp, console"):
        mailer_of(monkeypatch, settings, "carrier-pigeon")


def test_the_file_backend_writes_notices(mail_notice, monkeypatch, run_worker, tmp_path):
    mailer_of(monkeypatch, mail_notice, "file", EMAIL_FILE_PATH=str(tmp_path / "mail"))
    assert notice_after_a_failure(run_worker).status == JobStatus.SUCCESSFUL
    written = "".join(path.read_text() for path in (tmp_path / "mail").iterdir())
    assert "To: ops@example.com" in written


def test_a_notice_that_cannot_be_mailed_is_a_warning_with_the_reason(mail_notice, monkeypatch,
                                                                   run_worker, caplog):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        closed_port = taken.getsockname()[1]  # closed again when the block ends
    mailer_of(monkeypatch, mail_notice, "smtp", EMAIL_HOST="127.0.0.1", EMAIL_PORT=str(closed_port),
              EMAIL_TIMEOUT="2")
    with caplog.at_level(logging.WARNING, logger="jobs.notices"):
        notice = notice_after_a_failure(run_worker)
    assert notice.status == JobStatus.READY and notice.error_code == "mail_failed"
    assert "ConnectionRefusedError" in notice.error
    warning = next(r for r in caplog.records if "could not be mailed" in r.getMessage())
    assert warning.levelno == logging.WARNING
    assert "ops@example.com" in warning.getMessage() and "ConnectionRefusedError" in warning.getMessage()


def test_a_bad_allow_entry_is_a_system_check_error(settings):
    settings.JOBS_FAILURE_WEBHOOK_ALLOW = ["127.0.0.1:8000", "hooks.internal:80"]
    errors = [e for e in run_checks() if e.id == "jobs.E007"]
    assert errors and "'hooks.internal:80'" in errors[0].msg
    assert "JOBS_FAILURE_WEBHOOK_ALLOW" in errors[0].msg
