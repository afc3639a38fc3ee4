"""Every change to insights, one function each; the reads are in selectors.py.

A request is an enqueue on the engine with the insight's unique key and the
fingerprint of its data: asking again is idempotent (the live job is
returned, promoted if asked at a higher tier, never demoted), and a finished
insight whose data did not change is returned as it is. Nothing here retries,
waits or limits: the kinds' policy (handlers.py) and the `insights` queue do.
"""

import logging
import uuid

from django.conf import settings
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

import jobs
from downloads.services import lock_owner
from insights import conf, data, generators
from insights.models import Insight, InsightKind, InsightStatus
from jobs.exceptions import Fail, IllegalTransition
from jobs.models import Job, JobStatus

log = logging.getLogger(__name__)

TIERS = {"interactive": conf.INTERACTIVE, "prefetch": conf.PREFETCH}

# Kinds with one subject per user: a request drops queued jobs of the same
# kind for any other subject (a safety net should the subject's spelling
# ever change, as the seed's "trends" key once did, minting a job per poll).
SINGLE_SUBJECT = {InsightKind.LIBRARY_OVERVIEW}

# Jobs after whose success new data exists to write about (the CV app's
# kinds); their payload names the "asset" and, for one clip, the "shot".
# Each new one gets an `insights.prefetch` job as its follow-up (handlers.py).
PREFETCH_AFTER = {"downloads.segment", "downloads.analyze"}


class SubjectNotFound(Exception):
    """The user has no such subject (another user's subject reads as absent)."""


class TooManyQueued(Exception):
    """The user already has as many insights waiting or being written as the cap allows."""

    def __init__(self, limit):
        self.limit = limit
        super().__init__(
            _("You already have %(n)d insights waiting or being written; ask again when some "
              "are done.") % {"n": limit})


def is_insight_kind(job_kind):
    return job_kind.startswith("insights.")


def job_kind(kind):
    """The engine kind that generates insights of `kind`."""
    return f"insights.{InsightKind(kind).value}"


# --- Requests ----------------------------------------------------------------------


def insight_request(*, owner, kind, subject, tier="interactive", language=None):
    """Ask for the insight of (owner, kind, subject) at `tier`; returns the Insight.

    Raises ValueError for an unknown kind or tier, data.SubjectInvalid for a
    badly spelled subject, SubjectNotFound when the user has no such subject,
    data.Unavailable when this kind cannot be made here. `language` defaults
    to the language the insight was last asked in.
    """
    kind = InsightKind(kind)
    if tier not in TIERS:
        raise ValueError(_("The priority must be “interactive” or “prefetch”, not %(tier)r.")
                         % {"tier": tier})
    provider = data.provider(kind)
    subject = provider.parse(subject)
    facts = _collect(provider, owner, subject)
    with transaction.atomic():
        lock_owner(owner)  # two requests at once must not both pass the cap
        insight, _created = Insight.objects.get_or_create(
            owner=owner, kind=kind, subject=subject,
            defaults={"language": language or settings.LANGUAGE_CODE})
        language = language or insight.language
        # Someone is looking: the data the insight is made from is asked for first, and the
        # insight waits for it. A prefetch writes from what is there.
        parents = provider.prepare(owner, subject, TIERS[tier]) if tier == "interactive" else []
        # Data on its way is new data: notes written without it are stale once it is there.
        fingerprint = data.fingerprint(
            {**facts, "awaits": sorted(p.pk for p in parents)} if parents else facts, language)
        current = Job.objects.filter(pk=insight.job_id).first() if insight.job_id else None
        fresh = (insight.generated_at is not None and insight.fingerprint == fingerprint
                 and (current is None or not current.is_live))
        if fresh:
            return insight
        _check_cap(owner, insight, tier)
        job = jobs.enqueue(job_kind(kind), {"insight": str(insight.pk)}, owner=owner,
                           queue=conf.queue(), priority=TIERS[tier], fingerprint=fingerprint,
                           max_attempts=conf.max_attempts(), supersede=kind in SINGLE_SUBJECT,
                           depends_on=parents or None, on_dependency_failure="run")
        changes = {"job": job, "status": job.status.lower(), "language": language,
                   "requested_at": timezone.now()}
        if job.is_live:
            changes.update(error_code="", error="")
        Insight.objects.filter(pk=insight.pk).update(**changes)
        for name, value in changes.items():
            setattr(insight, name, value)
    return insight


def _check_cap(owner, insight, tier):
    """Refuse a new job past the user's cap (one merging into the insight's live job is not new).

    A request counts the user's live requests (interactive); a prefetch counts everything live,
    so prefetches fill only the room requests leave and never crowd them out.
    """
    limit = conf.user_queued()
    if jobs.owner_at_cap(owner, [job_kind(k) for k in InsightKind], limit,
                         unique_key=f"insight:{insight.pk}",
                         min_priority=conf.INTERACTIVE if tier == "interactive" else None):
        raise TooManyQueued(limit)


def insights_prefetch(owner, *, asset_id=None, shot_id=None):
    """Queue, at prefetch priority, what new data for `owner` makes worth writing.

    The library overview always; a video summary when `asset_id` is given,
    shot notes when `shot_id` is. Queued insight jobs whose subject is gone
    are dropped first. Returns the insights requested.
    """
    insights_drop_vanished(owner)
    wanted = [(InsightKind.LIBRARY_OVERVIEW, data.LIBRARY)]
    if asset_id is not None:
        wanted.append((InsightKind.VIDEO_SUMMARY, asset_id))
    if shot_id is not None:
        wanted.append((InsightKind.SHOT_NOTES, shot_id))
    requested = []
    for kind, subject in wanted:
        try:
            requested.append(insight_request(owner=owner, kind=kind, subject=subject,
                                             tier="prefetch"))
        except (SubjectNotFound, data.SubjectInvalid, data.Unavailable, TooManyQueued):
            continue
    return requested


def insights_drop_vanished(owner):
    """Cancel the owner's queued insight jobs whose subject no longer exists; returns how many."""
    queued = Job.objects.filter(owner=owner, kind__startswith="insights.", status=JobStatus.READY)
    # Only jobs that write an insight name one; a prefetch waiting for its CV job does not.
    by_id = {}
    for job in queued.only("pk", "payload", "queue"):
        try:
            by_id[str(uuid.UUID(str(job.payload["insight"])))] = job
        except (TypeError, KeyError, ValueError):
            continue
    insights = {str(i.pk): i for i in Insight.objects.filter(pk__in=list(by_id))} if by_id else {}
    dropped = 0
    for insight_id, job in by_id.items():
        insight = insights.get(insight_id)
        if insight is not None and data.provider(insight.kind).exists(owner, insight.subject):
            continue
        try:
            jobs.cancel(job, reason=_("Superseded: its subject no longer exists."))
        except IllegalTransition:
            continue  # claimed meanwhile: the handler will find the subject gone
        dropped += 1
    return dropped


def prefetch_after(parent_kind, parent_payload, owner):
    """Prefetch the insights that the new data of a CV job that succeeded feeds (the
    `insights.prefetch` follow-up's work: the engine ran it because its parent succeeded)."""
    if parent_kind not in PREFETCH_AFTER or not conf.prefetch():
        return {"skipped": "off" if parent_kind in PREFETCH_AFTER else "not_cv"}
    payload = parent_payload if isinstance(parent_payload, dict) else {}
    asset_id, shot_id = payload.get("asset"), payload.get("shot")
    if owner is not None:
        owners = [owner]
    elif asset_id is not None:
        owners = _owners_of(asset_id)  # a shared asset's CV job serves everyone holding it
    else:
        return {"skipped": "no_owner"}
    for each in owners:
        insights_prefetch(each, asset_id=asset_id, shot_id=shot_id)
    return {"owners": len(owners)}


def _owners_of(asset_id):
    from django.contrib.auth import get_user_model

    from downloads.models import Download

    owner_ids = Download.objects.filter(asset_id=asset_id).values("owner_id")
    return list(get_user_model().objects.filter(pk__in=owner_ids))


# --- Retries ---------------------------------------------------------------------------


def insight_retry(insight, *, actor=None):
    """Queue a failed or cancelled insight again now, attempts reset, skipping its cool-down."""
    job = Job.objects.filter(pk=insight.job_id).first() if insight.job_id else None
    if job is None:
        if insight.status not in (InsightStatus.FAILED, InsightStatus.CANCELLED):
            raise IllegalTransition(_("Only a failed insight can be retried."))
        # Its job was pruned: a new request makes a new one.
        return insight_request(owner=insight.owner, kind=insight.kind, subject=insight.subject,
                               tier="interactive")
    jobs.retry(job, actor=actor, reason=_("Retried by its owner."))
    Insight.objects.filter(pk=insight.pk).update(status=InsightStatus.READY, error_code="", error="")
    insight.status, insight.error_code, insight.error = InsightStatus.READY, "", ""
    return insight


def insights_retry_failed(owner):
    """Queue every failed insight job of `owner` again, now; returns (retried, skipped)."""
    failed = Job.objects.filter(owner=owner, kind__startswith="insights.", status=JobStatus.FAILED)
    retried = skipped = 0
    for job in failed.only("pk", "queue").order_by("pk"):
        try:
            jobs.retry(job, actor=owner, reason=_("Retry failed, asked by its owner."))
        except IllegalTransition:
            skipped += 1  # a newer job of the same insight is live, or it changed meanwhile
            continue
        Insight.objects.filter(job_id=job.pk).update(status=InsightStatus.READY, error_code="",
                                                     error="")
        retried += 1
    return retried, skipped


# --- The job's side ------------------------------------------------------------------


def insight_generate(ctx, insight_id):
    """Generate one insight (the handler's work): read the facts, write the text.

    Runs on a worker, in the language the insight was asked in. A subject
    that vanished fails at once, before any gateway call.
    """
    insight = Insight.objects.select_related("owner").filter(pk=insight_id).first()
    if insight is None:
        return {"skipped": "deleted"}  # deleted with its user; nothing to write
    with translation.override(insight.language):
        try:
            facts = _collect(data.provider(insight.kind), insight.owner, insight.subject)
        except SubjectNotFound:
            raise Fail(_("The subject of this insight no longer exists."),
                       code="subject_gone") from None
        except data.Unavailable as exc:
            raise Fail(str(exc), code="unavailable") from None
        fingerprint = data.fingerprint(facts, insight.language)
        generated = generators.generate(insight.kind, facts, language=insight.language)
    if ctx.should_stop():
        return None  # cancelled, paused, lost or timed out meanwhile: the engine records which
    # Fenced by the lease: a worker whose job was rescued while it waited on
    # the gateway must not overwrite what the rescuing attempt wrote.
    with ctx.fenced():
        ctx.read_data(fingerprint)  # newer data asked for meanwhile may be what was read
        Insight.objects.filter(pk=insight.pk).update(
            text=generated.text, fingerprint=fingerprint, generator=generated.generator,
            model=generated.model, generated_at=timezone.now(), status=InsightStatus.SUCCESSFUL,
            error_code="", error="")
    return {"generator": generated.generator, "model": generated.model,
            "chars": len(generated.text)}


def _collect(provider, owner, subject):
    """The facts about the owner's subject as they are now. Raises SubjectNotFound when the
    owner has no such subject, data.Unavailable when they cannot be read here."""
    if not provider.exists(owner, subject):
        raise SubjectNotFound(_("No such subject."))
    return provider.collect(owner, subject)


def insight_record_outcome(job):
    """Copy a finished job's final state onto its insight (pruning the job later loses nothing).

    Newer data asked for while it ran makes the engine run it again, queued by now: the
    insight follows that run instead, and its page keeps watching.
    """
    again = Job.objects.live().filter(unique_key=job.unique_key).exclude(pk=job.pk).first() \
        if job.unique_key else None
    if again is not None:
        Insight.objects.filter(job_id=job.pk).update(job=again, status=again.status.lower(),
                                                     error_code="", error="")
        return
    changes = {"status": job.status.lower()}
    if job.status == JobStatus.SUCCESSFUL:
        changes.update(error_code="", error="")
    else:
        changes.update(error_code=job.error_code or "", error=job.error or "")
    Insight.objects.filter(job_id=job.pk).update(**changes)
