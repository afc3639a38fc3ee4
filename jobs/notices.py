"""Failure notices: people told by e-mail or webhook when jobs fail for good (JOBS_FAILURE_NOTIFY).

Besides the ERROR log line every failure writes (jobs/engine/history.py), each
target of JOBS_FAILURE_NOTIFY (all e-mail addresses together, each webhook
URL apart) hears of failures through jobs of the `jobs.notify_failure`
kind, so sending is retried and never holds up the worker that recorded
the failure. An outage must not send ten thousand messages:

1. The failing job's final transaction adds one to its FailureNotice row
   (target, kind, error code) and, when no notice job is scheduled for that
   row, queues one: at once, or at the end of the window after the last
   message (JOBS_FAILURE_NOTIFY_WINDOW_SECONDS). A rolled-back failure
   counts nothing and queues nothing.
2. The notice job sends one message for everything pending: the latest
   failed job (id, kind, queue, error, attempts, admin link) and how many
   failed since.
3. Its completion takes what it told off `pending` in the same transaction
   and, if more failed meanwhile, queues the next notice a window later.

Delivery is at least once: a worker killed after sending, before its
completion commits, sends that message again. A webhook is posted through
the engine's egress guard (jobs/egress.py): public addresses only, unless
JOBS_FAILURE_WEBHOOK_ALLOW admits one, no redirect followed, and the whole
delivery within JOBS_FAILURE_WEBHOOK_TIMEOUT_SECONDS. A message that cannot
go (an unreachable or misconfigured mailer, a refused webhook) is a warning
in the log with the reason, and is tried again.
"""

import hashlib
import json
import logging
from datetime import timedelta

from django.core.mail import send_mail
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from jobs import conf, egress
from jobs.engine import queries
from jobs.engine.enqueue import enqueue
from jobs.exceptions import Retry
from jobs.models import FailureNotice, Job, JobStatus

log = logging.getLogger(__name__)

KIND = "jobs.notify_failure"
USER_AGENT = "haulage-failure-notice/1"


def targets():
    """{digest: (channel, address)}: "mail" with the list of addresses, or "webhook" with a URL."""
    emails, urls = conf.failure_targets()
    found = [("mail", sorted(emails))] if emails else []
    found += [("webhook", url) for url in urls]
    return {_digest(channel, address): (channel, address) for channel, address in found}


def _digest(channel, address):
    text = f"{channel}:{','.join(address) if isinstance(address, list) else address}"
    return hashlib.sha256(text.encode()).hexdigest()


def job_failed(job):
    """In the transaction that failed `job` for good: count it for every target, and queue a
    notice where none is scheduled."""
    if job.kind == KIND:
        return  # a notice that cannot be sent is logged, never noticed about itself
    found = targets()
    if not found:
        return
    now = timezone.now()
    window = timedelta(seconds=conf.JOBS_FAILURE_NOTIFY_WINDOW_SECONDS)
    code = job.error_code or ""
    for digest in sorted(found):  # one order for every writer: no deadlock between two failures
        queries.count_failure(digest, job.kind, code, job.pk, now)
        row = FailureNotice.objects.filter(target=digest, kind=job.kind, error_code=code)
        # The row is ours until commit (the upsert locked it): the flag flips once.
        if row.filter(scheduled=False).update(scheduled=True):
            notice = row.get()
            run_after = max(now, notice.sent_at + window) if notice.sent_at else now
            enqueue(KIND, {"notice": notice.pk}, run_after=run_after)


def send(payload):
    """Send one notice for its row's pending failures; returns {"told": how many it covered}."""
    notice = FailureNotice.objects.filter(pk=payload.get("notice")).first()
    if notice is None or not notice.pending:
        return {"told": 0}
    target = targets().get(notice.target)
    if target is None:
        # JOBS_FAILURE_NOTIFY no longer names this target: the failures are let go.
        return {"told": notice.pending, "dropped": True}
    channel, address = target
    document = _document(notice)
    if channel == "mail":
        _send_mail(address, document)
    else:
        _post(address, document)
    return {"told": notice.pending}


def settle(job):
    """The notice job's own `finished` hook, in its final transaction: what it told is no longer
    pending; the next notice, if more failed meanwhile, goes a window later."""
    row = FailureNotice.objects.select_for_update().filter(pk=job.payload.get("notice")).first()
    if row is None:
        return
    told = (job.result or {}).get("told", 0) if job.status == JobStatus.SUCCESSFUL else 0
    now = timezone.now()
    row.pending = max(0, row.pending - told)
    if told:
        row.sent_at = now
        row.since = now if row.pending else None
    # A notice that failed or was cancelled leaves the rest to the next failure.
    row.scheduled = bool(row.pending) and job.status == JobStatus.SUCCESSFUL
    row.save(update_fields=["pending", "sent_at", "since", "scheduled"])
    if row.scheduled:
        window = timedelta(seconds=conf.JOBS_FAILURE_NOTIFY_WINDOW_SECONDS)
        enqueue(KIND, {"notice": row.pk}, run_after=now + window)


# --- What is sent --------------------------------------------------------------


def _document(notice):
    """The JSON a webhook receives (the e-mail says the same): the latest failed job, and how many."""
    job = Job.objects.filter(pk=notice.last_job_id).first()
    return {
        "job_id": notice.last_job_id,
        "kind": notice.kind,
        "queue": job.queue if job else None,
        "error": job.error if job else None,
        "error_code": notice.error_code,
        "attempts": job.attempts if job else None,
        "admin_url": admin_url(notice.last_job_id),
        "failed": notice.pending,
        "since": notice.since.isoformat() if notice.since else None,
    }


def admin_url(job_id):
    try:
        path = reverse("admin:jobs_job_change", args=[job_id])
    except NoReverseMatch:
        return None  # a project without the admin
    return f"{str(conf.JOBS_SITE_URL).rstrip('/')}{path}"


def _mail(document):
    subject = ngettext("Job #%(job)s (%(kind)s) failed: %(code)s",
                       "%(n)d jobs of %(kind)s failed: %(code)s", document["failed"]) % {
        "job": document["job_id"], "kind": document["kind"], "n": document["failed"],
        "code": document["error_code"] or "-"}
    lines = [
        subject,
        "",
        _("Latest: job #%(job)s in queue %(queue)s, after %(attempts)s attempt(s).")
        % {"job": document["job_id"], "queue": document["queue"] or "-",
           "attempts": document["attempts"] if document["attempts"] is not None else "-"},
        _("Error: %(error)s") % {"error": document["error"] or "-"},
    ]
    if document["since"]:
        lines.append(_("Failures counted since %(since)s.") % {"since": document["since"]})
    if document["admin_url"]:
        lines.append(_("See it in the admin: %(url)s") % {"url": document["admin_url"]})
    return subject, "\n".join(lines) + "\n"


def _send_mail(addresses, document):
    subject, body = _mail(document)
    try:
        send_mail(subject, body, None, addresses)
    except Exception as exc:  # the mailer's own errors: SMTP, sockets, its configuration
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("A failure notice to %s could not be mailed (%s); it is tried again.",
                    ", ".join(addresses), reason)
        raise Retry(_("The notice could not be mailed: %(error)s") % {"error": reason},
                    code="mail_failed") from None


# Why a webhook delivery failed -> the notice job's error code.
WEBHOOK_ERRORS = {
    egress.Blocked: "webhook_blocked",
    egress.Redirected: "webhook_redirected",
    egress.Refused: "webhook_refused",
    egress.TimedOut: "webhook_timeout",
    egress.Unreachable: "webhook_unreachable",
}


def _post(url, document):
    try:
        egress.post_json(url, json.dumps(document).encode(), policy=conf.webhook_policy(),
                         deadline_s=conf.JOBS_FAILURE_WEBHOOK_TIMEOUT_SECONDS,
                         headers={"User-Agent": USER_AGENT})
    except egress.DeliveryError as exc:
        reason = str(exc)
        if isinstance(exc, egress.Blocked):
            reason += "; see JOBS_FAILURE_WEBHOOK_ALLOW"
        log.warning("A failure notice to the webhook %s was not delivered (%s); it is tried again.",
                    url, reason)
        raise Retry(_("The webhook did not take the notice: %(error)s") % {"error": reason},
                    code=WEBHOOK_ERRORS[type(exc)]) from None
