"""Failure notices: people told by e-mail or webhook when jobs fail for good (JOBS_FAILURE_NOTIFY).

Besides the ERROR log line every failure writes (jobs/history.py), each
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
completion commits, sends that message again.
"""

import hashlib
import json
import logging
import urllib.error
import urllib.request
from datetime import timedelta

from django.core.mail import send_mail
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from jobs import conf, queries
from jobs.exceptions import Retry
from jobs.models import FailureNotice, Job, JobStatus

log = logging.getLogger(__name__)

KIND = "jobs.notify_failure"
WEBHOOK_TIMEOUT_S = 10
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
    from jobs import services  # services calls this module: imported when first needed

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
            services.enqueue(KIND, {"notice": notice.pk}, run_after=run_after)


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
        subject, body = _mail(document)
        send_mail(subject, body, None, address)
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
        from jobs import services

        window = timedelta(seconds=conf.JOBS_FAILURE_NOTIFY_WINDOW_SECONDS)
        services.enqueue(KIND, {"notice": row.pk}, run_after=now + window)


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


def _post(url, document):
    request = urllib.request.Request(
        url, data=json.dumps(document).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
            response.read(65536)
    except urllib.error.HTTPError as exc:
        exc.close()  # it carries the refused response, and with it the socket
        raise Retry(_("The webhook answered HTTP %(status)d.") % {"status": exc.code},
                    code="webhook_refused") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Retry(_("The webhook could not be reached: %(error)s") % {"error": exc},
                    code="webhook_unreachable") from None
