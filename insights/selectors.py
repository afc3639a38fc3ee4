"""Read paths for the insight pages, the JSON API and the queue page. Nothing here writes.

`insight_state()` is the one description of an insight that the panel and
the API both render: its status (from the job while there is one), where it
stands in the queue and why, and its text. `queue_of()` is a user's jobs of
every kind in the order workers will take them.
"""

import uuid
from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

from insights import conf
from insights.models import Generator, Insight, InsightKind, InsightStatus
from jobs import registry
from jobs import selectors as job_selectors
from jobs.models import CLAIM_ORDER, Job, JobStatus, Queue

S = InsightStatus
STANDING_LIMIT = 100  # queued jobs of the queue page whose place is counted
HISTORY_LIMIT = 50  # failed and finished jobs shown on the queue page, each
LIVE_LIMIT = 200


def served_kinds():
    """Kinds some live worker serves, read once for a whole list."""
    return job_selectors.live_kinds()


def tier_of(priority):
    return "interactive" if priority >= conf.INTERACTIVE else "prefetch"


# --- Insights ----------------------------------------------------------------------


def insights_of(user):
    return Insight.objects.filter(owner=user).select_related("job")


def insight_of(user, insight_id):
    """The user's insight with this id, or None (another user's id reads as absent)."""
    try:
        key = uuid.UUID(str(insight_id))
    except ValueError:
        return None
    return insights_of(user).filter(pk=key).first()


def insight_for(user, kind, subject):
    return insights_of(user).filter(kind=kind, subject=str(subject)).first()


@dataclass
class InsightState:
    insight: Insight
    status: str
    status_label: str
    tier: str | None = None
    queue_position: int | None = None
    waiting_code: str = ""
    waiting_reason: str = ""
    attempts: int | None = None
    max_attempts: int | None = None
    error_code: str = ""
    error: str = ""

    @property
    def is_live(self):
        return self.status in (S.READY, S.RUNNING, S.PAUSED)

    @property
    def text(self):
        return self.insight.text

    @property
    def is_local(self):
        return self.insight.generator == Generator.LOCAL

    @property
    def updating(self):
        """An earlier text is shown while a new one is made."""
        return self.is_live and bool(self.insight.text)


def insight_state(insight, *, served_kinds=None):
    """Everything a page or the API shows about one insight (a few queries while it waits)."""
    job = insight.job if insight.job_id else None
    status = job.status.lower() if job is not None else insight.status
    state = InsightState(insight=insight, status=status, status_label=str(S(status).label))
    if job is not None:
        state.tier = tier_of(job.priority)
        state.attempts, state.max_attempts = job.attempts, job.max_attempts
    if status == S.READY and job is not None:
        standing = job_selectors.standing(job, served_kinds=served_kinds)
        state.queue_position = standing.position
        state.waiting_code = standing.reason
        state.waiting_reason = str(standing.message)
    if status in (S.FAILED, S.CANCELLED) or (status == S.READY and job and job.error_code):
        # A queued job with an error is waiting to retry after it.
        state.error_code = (job.error_code if job is not None else insight.error_code) or ""
        state.error = (job.error if job is not None else insight.error) or ""
    return state


# --- The queue page -------------------------------------------------------------------

KIND_LABELS = {
    "downloads.fetch": _("Download"),
    "downloads.edit": _("Edit"),
    **{f"insights.{k.value}": k.label for k in InsightKind},
}


@dataclass
class QueueEntry:
    job: Job
    label: str
    subject: str
    status: str
    status_label: str
    tier: str
    queue_position: int | None = None
    waiting_reason: str = ""


def queue_of(user):
    """The user's jobs: running, then queued in claim order, paused, failed, then finished."""
    mine = Job.objects.filter(owner=user)
    groups = [
        mine.filter(status=JobStatus.RUNNING).order_by("started_at", "id")[:LIVE_LIMIT],
        mine.filter(status=JobStatus.READY).order_by(*CLAIM_ORDER)[:LIVE_LIMIT],
        mine.filter(status=JobStatus.PAUSED).order_by(*CLAIM_ORDER)[:LIVE_LIMIT],
        mine.filter(status=JobStatus.FAILED).order_by("-finished_at", "-id")[:HISTORY_LIMIT],
        mine.filter(status__in=[JobStatus.SUCCESSFUL, JobStatus.CANCELLED])
        .order_by("-finished_at", "-id")[:HISTORY_LIMIT],
    ]
    jobs = [job for group in groups for job in group]
    subjects = _subjects(jobs)
    served = served_kinds()
    entries, counted = [], 0
    for job in jobs:
        entry = QueueEntry(job=job, label=str(KIND_LABELS.get(job.kind, job.kind)),
                           subject=subjects.get(job.pk, ""), status=job.status.lower(),
                           status_label=job.get_status_display(), tier=tier_of(job.priority))
        if job.status == JobStatus.READY and counted < STANDING_LIMIT:
            standing = job_selectors.standing(job, served_kinds=served)
            entry.queue_position, entry.waiting_reason = standing.position, str(standing.message)
            counted += 1
        entries.append(entry)
    return entries


def describe_subjects(insights):
    """{insight id: its subject in words} (video titles instead of asset numbers), in one query."""
    from downloads.models import MediaAsset

    asset_ids = [int(i.subject) for i in insights if i.kind == InsightKind.VIDEO_SUMMARY]
    titles = dict(MediaAsset.objects.filter(pk__in=asset_ids).values_list("pk", "title"))
    words = {}
    for insight in insights:
        if insight.kind == InsightKind.VIDEO_SUMMARY:
            words[insight.pk] = titles.get(int(insight.subject)) or insight.subject
        elif insight.kind == InsightKind.LIBRARY_OVERVIEW:
            words[insight.pk] = str(_("your library"))
        else:
            words[insight.pk] = str(_("shot %(id)s") % {"id": insight.subject})
    return words


def _subjects(jobs):
    """What each job works on, in words (a query per family of kinds, not per job)."""
    from downloads.models import Download

    found = {}
    insight_ids = {str(j.payload.get("insight")): j.pk for j in jobs if j.kind.startswith("insights.")}
    insights = list(Insight.objects.filter(pk__in=[i for i in insight_ids if _is_uuid(i)]))
    for insight_id, words in describe_subjects(insights).items():
        found[insight_ids[str(insight_id)]] = words
    download_ids = {str(j.payload.get("download")): j.pk for j in jobs
                    if j.kind.startswith("downloads.") and j.payload.get("download")}
    downloads = Download.objects.filter(pk__in=[i for i in download_ids if _is_uuid(i)])
    for download in downloads.select_related("asset"):
        found[download_ids[str(download.pk)]] = download.name or download.asset.title or download.asset.url
    return found


def _is_uuid(value):
    try:
        uuid.UUID(value)
    except (TypeError, ValueError):
        return False
    return True


@dataclass
class QueueSettings:
    name: str
    paused: bool
    concurrency: int | None  # None: no global limit
    gap_seconds: float
    max_attempts: list  # per kind of the queue, distinct values
    cooldown_s: list


def queue_settings(names):
    """The settings in force for the queues `names` (the Queue row, else JOBS_QUEUES' start)."""
    from jobs import conf as jobs_conf

    rows = {q.name: q for q in Queue.objects.filter(name__in=list(names))}
    defaults = jobs_conf.queue_defaults()
    result = []
    for name in sorted(names, key=lambda n: (n != conf.QUEUE, n)):
        row = rows.get(name)
        start = defaults.get(name, {})
        policies = [registry.get(k).policy for k in registry.names()
                    if registry.get(k).policy.queue == name]
        if name == conf.QUEUE:
            attempts = [conf.max_attempts()]  # set per job at enqueue
        else:
            attempts = sorted({p.attempts_allowed() for p in policies})
        result.append(QueueSettings(
            name=name,
            paused=row.paused if row else False,
            concurrency=row.concurrency if row else start.get("concurrency"),
            gap_seconds=row.gap_seconds if row else start.get("gap_seconds", 0),
            max_attempts=attempts,
            cooldown_s=sorted({p.cooldown_s for p in policies if p.cooldown_s}),
        ))
    return result


def queue_names_of(entries):
    """The queues whose settings the queue page shows: the insights queue and those in use."""
    return {conf.QUEUE} | {entry.job.queue for entry in entries}
