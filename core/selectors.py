"""What the home page reads: a user's jobs of every kind, live ones first. Nothing here writes.

Each kind of job is described by the app that owns it (downloads.selectors'
`download_state`, downloads.shots' `job_state`, insights.selectors'
`insight_state` and `describe_subjects`); this module only gathers the
user's rows, puts them in one order and in one shape for the page.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import Case, Q, When
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from downloads import selectors as downloads
from downloads import shots
from downloads.egress import EgressPolicy
from downloads.models import Shot
from insights import selectors as insights
from insights.models import LIVE as INSIGHT_LIVE
from jobs.engine import registry
from jobs.models import LIVE_STATUSES, Job, JobStatus
from jobs.selectors import standing as job_selectors

LIVE_LIMIT = 20  # live jobs listed; the queue page lists every one
RECENT_LIMIT = 10  # finished jobs listed; the downloads and insights pages list them all

# Live jobs in this order, then by when they started or were queued.
LIVE_ORDER = {"running": 0, "ready": 1, "paused": 2}


@dataclass
class HomeJob:
    """One of the user's jobs as the home page lists it, whatever its kind."""

    id: str  # the element's id, unique across kinds
    family: str  # download | shots | insight
    label: str  # what the job does: "Download", "Shot detection", "Video summary"
    title: str  # what it works on
    url: str  # where it lives; "" when nowhere (the user no longer holds its video)
    status: str  # the engine's state in lower case, or "evicted"
    status_label: str
    at: datetime  # when it started or was queued (live), or ended
    fraction: float | None = None  # 0..1
    detail: str = ""  # the phase or message of a live job
    queue_position: int | None = None
    waiting_reason: str = ""
    error: str = ""

    @property
    def is_live(self):
        return self.status in LIVE_ORDER

    @property
    def percent(self):
        return None if self.fraction is None else round(self.fraction * 100, 1)

    @property
    def just_now(self):
        return timezone.now() - self.at < timedelta(minutes=1)


@dataclass
class Home:
    live: list  # of HomeJob: running, then queued, then paused
    recent: list  # of HomeJob: the most recently ended first
    more_live: bool  # live jobs beyond LIVE_LIMIT exist

    @property
    def empty(self):
        return not (self.live or self.recent)


def home_of(user):
    """The user's live jobs and their most recently finished ones, of every kind."""
    served = job_selectors.live_kinds()
    mine = downloads.downloads_of(user)
    live_downloads = mine.live()
    my_insights = insights.insights_of(user)
    insight_live = Q(job__status__in=LIVE_STATUSES) | Q(job__isnull=True, status__in=INSIGHT_LIVE)
    my_cv = Job.objects.filter(owner=user, kind__in=shots.CV_KINDS)

    def running_first(status):
        return Case(When(**{status: JobStatus.RUNNING}, then=0), default=1)

    live = [
        *_download_jobs(live_downloads.order_by(running_first("job__status"), "created_at")
                        [:LIVE_LIMIT + 1], served),
        *_cv_jobs(user, my_cv.live().order_by(running_first("status"), "enqueued_at", "id")
                  [:LIVE_LIMIT + 1]),
        *_insight_jobs(user, my_insights.filter(insight_live).order_by(
            running_first("job__status"), "requested_at")[:LIVE_LIMIT + 1], served),
    ]
    # A job that ended since the query sorts last here; the next poll lists it as ended.
    live.sort(key=lambda job: (LIVE_ORDER.get(job.status, len(LIVE_ORDER)), job.at))
    recent = [
        *_download_jobs(mine.exclude(pk__in=live_downloads.values("pk")).order_by(
            Coalesce("job__finished_at", "finished_at", "created_at").desc())[:RECENT_LIMIT],
            served),
        *_cv_jobs(user, my_cv.finished().order_by("-finished_at", "-id")[:RECENT_LIMIT]),
        *_insight_jobs(user, my_insights.exclude(insight_live).order_by(
            Coalesce("job__finished_at", "generated_at", "requested_at").desc())[:RECENT_LIMIT],
            served),
    ]
    recent.sort(key=lambda job: job.at, reverse=True)
    return Home(live=live[:LIVE_LIMIT], recent=recent[:RECENT_LIMIT],
                more_live=len(live) > LIVE_LIMIT)


def sample_url():
    """The sample video `make run` serves (HAULAGE_SAMPLE_URL) when downloads may reach it,
    else None."""
    url = settings.HAULAGE_SAMPLE_URL
    address = urlsplit(url)
    if not url or not EgressPolicy.from_conf().permits(address.hostname, address.port):
        return None
    return url


def _when(job, *fallbacks):
    """When a live job started (or was queued), or when a finished one ended; the domain row's
    own times when its job is gone."""
    if job is not None:
        moment = {JobStatus.RUNNING: job.started_at, JobStatus.READY: job.enqueued_at,
                  JobStatus.PAUSED: job.enqueued_at}.get(job.status, job.finished_at)
        if moment is not None:
            return moment
    return next(moment for moment in fallbacks if moment is not None)


def _download_jobs(rows, served):
    for download in rows:
        state = downloads.download_state(download, served_kinds=served)
        yield HomeJob(
            id=f"download-{download.pk}", family="download",
            label=_("Edit") if download.asset.parent_id else _("Download"),
            title=str(download), url=reverse("downloads:detail", args=[download.pk]),
            status=state.status, status_label=state.status_label,
            at=_when(download.job, download.finished_at, download.created_at),
            fraction=state.fraction, detail=state.phase_label if state.is_live else "",
            queue_position=state.queue_position, waiting_reason=str(state.waiting_reason),
            error=state.error)


def _cv_jobs(user, rows):
    """CV jobs, each named by the user's video (and shot) and linked to that video's shots."""
    rows = list(rows)
    assets = {job.payload.get("asset") for job in rows}
    videos = {}
    for download in downloads.downloads_of(user).filter(
            asset_id__in=[a for a in assets if isinstance(a, int)]).successful():  # newest first
        videos.setdefault(download.asset_id, download)
    shot_ids = [job.payload.get("shot") for job in rows if job.kind == shots.ANALYZE_KIND]
    indexes = dict(Shot.objects.filter(pk__in=[s for s in shot_ids if isinstance(s, int)])
                   .values_list("pk", "index"))
    for job in rows:
        state = shots.job_state(job)
        video = videos.get(job.payload.get("asset"))
        title = str(video) if video is not None else _("A video you no longer hold")
        index = indexes.get(job.payload.get("shot"))
        if index is not None:
            title = _("Shot %(n)d of %(title)s") % {"n": index + 1, "title": title}
        yield HomeJob(
            id=f"job-{job.public_id}", family="shots", label=registry.label(job.kind),
            title=title,
            url=reverse("downloads:detail", args=[video.pk]) + "#shots" if video else "",
            status=state["status"], status_label=job.get_status_display(), at=_when(job),
            fraction=state["progress"],
            # CV workers report untranslated messages; the video page translates them too.
            detail=_(state["message"]) if state["message"] and job.is_live else "",
            queue_position=state["queue_position"],
            waiting_reason=str(state["waiting_reason"] or ""), error=state["error"] or "")


def _insight_jobs(user, rows, served):
    rows = list(rows)
    subjects = insights.describe_subjects(user, rows)
    for insight in rows:
        state = insights.insight_state(insight, served_kinds=served)
        job = insight.job
        fraction = 1.0 if state.status == "successful" else job.progress if job else None
        subject = subjects[insight.pk]
        yield HomeJob(
            id=f"insight-{insight.pk}", family="insight", label=insight.get_kind_display(),
            title=subject.words, url=subject.page_url, status=state.status,
            status_label=state.status_label,
            at=_when(job, insight.generated_at, insight.requested_at), fraction=fraction,
            queue_position=state.queue_position, waiting_reason=state.waiting_reason,
            error=state.error)
