"""Read paths for the insight pages, the JSON API and the queue page. Nothing here writes.

`insight_state()` is the one description of an insight that the panel and
the API both render: its status (from the job while there is one), where it
stands in the queue and why, and its text. `queue_of()` is a user's jobs of
every kind in the order workers will take them.
"""

import uuid
from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from insights import conf
from insights.models import Generator, Insight, InsightKind, InsightStatus
from jobs.engine import registry
from jobs.models import CLAIM_ORDER, Job, JobStatus, Queue
from jobs.selectors import standing as job_selectors

S = InsightStatus
STANDING_LIMIT = 100  # queued jobs of the queue page whose place is counted
HISTORY_LIMIT = 50  # failed and finished jobs shown on the queue page, each
LIVE_LIMIT = 200


def served_kinds():
    """Kinds some live worker serves, read once for a whole list."""
    return job_selectors.live_kinds()


def tier_of(priority):
    """A priority in the user's words: what an open page asked for, what waits its turn, and
    what is prepared in the background (insights are asked for at one of the outer two)."""
    if priority >= conf.INTERACTIVE:
        return "interactive"
    return "normal" if priority >= 0 else "prefetch"


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


def insights_by_subject(user, kind, subjects):
    """{subject: the user's insight of `kind` about it}, for a whole list in one query."""
    rows = insights_of(user).filter(kind=kind, subject__in=[str(s) for s in subjects])
    return {insight.subject: insight for insight in rows}


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

    @property
    def text_soon(self):
        """Its text is a moment away: the local generator is writing it (milliseconds), or it is
        next in line and a worker takes it within its wake-up (or poll) time. With the local
        generator, a generation holding the queue's one slot ends within milliseconds too."""
        local = not conf.gateway_url()
        if self.status == S.RUNNING:
            return local
        if self.status != S.READY or self.queue_position != 1:
            return False
        return self.waiting_code == "queued" or (local and self.waiting_code == "queue_full")


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
        if standing.reason == "running":
            # A worker claimed the job since it was read: read the insight again (the
            # attempt may have written its text already).
            insight.refresh_from_db()
            return insight_state(insight, served_kinds=served_kinds)
        state.queue_position = standing.position
        state.waiting_code = standing.reason
        state.waiting_reason = str(standing.message)
    if status in (S.FAILED, S.CANCELLED) or (status == S.READY and job and job.error_code):
        # A queued job with an error is waiting to retry after it.
        state.error_code = (job.error_code if job is not None else insight.error_code) or ""
        state.error = (job.error if job is not None else insight.error) or ""
    return state


# --- What a job or an insight is about ---------------------------------------------


@dataclass
class Subject:
    """What an insight or a job stands for, as a person and a script find it."""

    words: str  # "Holiday clip", "Shot 3 of Holiday clip", "your library"
    page_url: str = ""  # where a person reads it (the video page, a shot on it)
    ref: dict | None = None  # {"type": "download"|"insight", "id", "url"} for the API


def _downloads_of_assets(user, asset_ids):
    """{asset id: the user's most recent download of it}, in one query."""
    from downloads.models import Download

    found = {}
    for download in (Download.objects.filter(owner=user, asset_id__in=set(asset_ids))
                     .select_related("asset").order_by("-created_at")):
        found.setdefault(download.asset_id, download)
    return found


def _video_page(download, shot_index=None):
    if download is None:
        return ""
    url = reverse("downloads:detail", args=[download.pk])
    return url if shot_index is None else f"{url}?shot={shot_index}#shot-notes"


def _title(download):
    return download.name or download.asset.title or download.asset.url


def describe_subjects(user, insights):
    """{insight id: Subject} (video titles and pages instead of asset and shot numbers),
    in a few queries for the whole list."""
    from downloads.models import MediaAsset, Shot

    def numbers(kind):  # subjects are stored in their canonical spelling (insights.data)
        return [int(i.subject) for i in insights if i.kind == kind and i.subject.isdigit()]

    shots = {s.pk: s for s in Shot.objects.filter(pk__in=numbers(InsightKind.SHOT_NOTES))}
    asset_ids = numbers(InsightKind.VIDEO_SUMMARY) + [s.asset_id for s in shots.values()]
    downloads = _downloads_of_assets(user, asset_ids)
    titles = dict(MediaAsset.objects.filter(pk__in=asset_ids).values_list("pk", "title"))
    found = {}
    for insight in insights:
        if insight.kind == InsightKind.LIBRARY_OVERVIEW:
            found[insight.pk] = Subject(str(_("your library")), reverse("insights:list"))
            continue
        number = int(insight.subject) if insight.subject.isdigit() else None
        if insight.kind == InsightKind.VIDEO_SUMMARY:
            download = downloads.get(number)
            title = _title(download) if download else titles.get(number) or insight.subject
            found[insight.pk] = Subject(title, _video_page(download))
            continue
        shot = shots.get(number)
        if shot is None:
            found[insight.pk] = Subject(str(_("a shot that no longer exists")))
            continue
        download = downloads.get(shot.asset_id)
        title = _title(download) if download else titles.get(shot.asset_id, "")
        found[insight.pk] = Subject(
            str(_("Shot %(n)d of %(title)s") % {"n": shot.index + 1, "title": title}),
            _video_page(download, shot.index))
    return found


def _subjects(user, jobs):
    """{job id: Subject} for the user's jobs (a query per family of kinds, not per job)."""
    from downloads.models import Download

    # Each job's payload names what it works for: an insight, a download, or (CV jobs) an
    # asset, which stands for the user's download of it. Several jobs may name one object.
    insight_ids = {j.pk: str(j.payload.get("insight")) for j in jobs if j.kind.startswith("insights.")}
    download_ids = {j.pk: str(j.payload.get("download")) for j in jobs
                    if j.kind.startswith("downloads.") and j.payload.get("download")}
    asset_ids = {j.pk: j.payload.get("asset") for j in jobs
                 if j.kind in CV_KINDS and isinstance(j.payload.get("asset"), int)}

    insights = list(Insight.objects.filter(
        owner=user, pk__in={i for i in insight_ids.values() if _is_uuid(i)}))
    by_insight = {}
    for insight_id, subject in describe_subjects(user, insights).items():
        subject.ref = {"type": "insight", "id": str(insight_id),
                       "url": reverse("insights:api_insight", args=[insight_id])}
        by_insight[str(insight_id)] = subject
    by_download = {str(d.pk): _download_subject(d) for d in Download.objects.filter(
        owner=user, pk__in={i for i in download_ids.values() if _is_uuid(i)}).select_related("asset")}
    by_asset = {asset_id: _download_subject(d)
                for asset_id, d in _downloads_of_assets(user, asset_ids.values()).items()}

    found = {}
    for job in jobs:
        subject = (by_insight.get(insight_ids.get(job.pk)) or by_download.get(download_ids.get(job.pk))
                   or by_asset.get(asset_ids.get(job.pk)))
        if subject is not None:
            found[job.pk] = subject
    return found


def _download_subject(download):
    return Subject(_title(download), reverse("downloads:detail", args=[download.pk]),
                   {"type": "download", "id": str(download.pk),
                    "url": reverse("downloads:api_download", args=[download.pk])})


def _is_uuid(value):
    try:
        uuid.UUID(value)
    except (TypeError, ValueError):
        return False
    return True


# --- The queue page -------------------------------------------------------------------

CV_KINDS = ("downloads.segment", "downloads.analyze")


@dataclass
class QueueEntry:
    job: Job
    label: str
    subject: Subject | None
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
    subjects = _subjects(user, jobs)
    served = served_kinds()
    entries, counted = [], 0
    for job in jobs:
        entry = QueueEntry(job=job, label=registry.label(job.kind), subject=subjects.get(job.pk),
                           status=job.status.lower(), status_label=job.get_status_display(),
                           tier=tier_of(job.priority))
        if job.status == JobStatus.READY and counted < STANDING_LIMIT:
            standing = job_selectors.standing(job, served_kinds=served)
            entry.queue_position, entry.waiting_reason = standing.position, str(standing.message)
            counted += 1
        entries.append(entry)
    return entries


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
    for name in sorted(names, key=lambda n: (n not in (conf.QUEUE, conf.LOCAL_QUEUE), n)):
        row = rows.get(name)
        start = defaults.get(name, {})
        insights_queue = name in (conf.QUEUE, conf.LOCAL_QUEUE)
        # The insight kinds' policy names the gateway's queue; their jobs go to either.
        policy_queue = conf.QUEUE if insights_queue else name
        policies = [registry.get(k).policy for k in registry.names()
                    if registry.get(k).policy.queue == policy_queue]
        if insights_queue:
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
    """The queues whose settings the queue page shows: the insights queue in force and those
    in use."""
    return {conf.queue()} | {entry.job.queue for entry in entries}


def notes_held(shot_ids, owner_ids):
    """Whether any of `owner_ids` has notes on one of `shot_ids`: written, or on their way."""
    return Insight.objects.filter(
        kind=InsightKind.SHOT_NOTES, owner_id__in=owner_ids, subject__in=[str(pk) for pk in shot_ids],
    ).exclude(status__in=[InsightStatus.FAILED, InsightStatus.CANCELLED], text="").exists()
