"""Read paths for pages, the JSON API and the handlers. Nothing here writes.

`download_state()` is the one description of a download that pages and the
API both render: its status (from the job while there is one), progress
figures, where it stands in the queue and why, and what may be done to it.
"""

from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef, Q, Sum
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from downloads import errors, progress, storage
from downloads.messages import STAFF_CANCEL, error_message
from downloads.models import Download, DownloadQuota, DownloadStatus, MediaAsset
from jobs.models import LIVE_STATUSES, Job
from jobs.selectors import standing as job_selectors

S = DownloadStatus


# --- Quotas --------------------------------------------------------------------

def quota_for(user):
    """The user's quota row, or an unsaved one holding today's defaults."""
    return DownloadQuota.objects.filter(user=user).first() or DownloadQuota(user=user)


def held_assets(user):
    """Assets the user holds: those of their finished downloads. Each is charged in full."""
    finished = Download.objects.filter(owner=user, status=S.SUCCESSFUL).filter(
        Q(job__isnull=True) | ~Q(job__status__in=["FAILED", "CANCELLED"]))
    return MediaAsset.objects.filter(pk__in=finished.values("asset_id"), state=MediaAsset.State.READY)


def storage_used_bytes(user, *, excluding=None):
    """Bytes of finished files the user holds, each asset counted once."""
    assets = held_assets(user)
    if excluding is not None:
        assets = assets.exclude(pk=excluding)
    return assets.aggregate(total=Sum("size_bytes"))["total"] or 0


def storage_left_bytes(user, *, excluding=None):
    """What the user may still store (None: no limit); `excluding` an asset they may already hold."""
    quota = quota_for(user)
    if quota.unlimited:
        return None
    return max(0, quota.storage_bytes - storage_used_bytes(user, excluding=excluding))


def holds(user, asset):
    return held_assets(user).filter(pk=asset.pk).exists()


def live_count(user):
    return Download.objects.filter(owner=user).live().count()


def asked_since(user, moment):
    """Downloads the user asked for since `moment`, finished at once from the cache or not."""
    return Download.objects.filter(owner=user, created_at__gte=moment).count()


# --- Downloads ------------------------------------------------------------------

def downloads_of(user):
    return Download.objects.filter(owner=user).select_related("asset", "job")


def download_of(user, download_id):
    """The user's download with this id, or None (another user's id reads as absent)."""
    return downloads_of(user).filter(pk=download_id).first()


ACTIONS = {
    S.READY: ("pause", "cancel"),
    S.RUNNING: ("pause", "cancel"),
    S.PAUSED: ("resume", "cancel"),
    S.SUCCESSFUL: ("delete",),
    S.FAILED: ("retry", "delete"),
    S.CANCELLED: ("retry", "delete"),
    S.EVICTED: ("retry", "delete"),  # the retry is shown as "Download again"
}

PHASES = {
    "starting": _("Starting"),
    "downloading": _("Downloading"),
    "postprocessing": _("Processing"),
    "editing": _("Editing"),
    "finishing": _("Finishing"),
    "cached": _("From the cache"),
}


@dataclass
class DownloadState:
    download: Download
    status: str  # the engine's state, lower case
    status_label: str
    fraction: float | None = None  # 0..1
    phase: str = ""
    phase_label: str = ""
    bytes_done: int | None = None
    bytes_total: int | None = None
    speed_bytes_s: float | None = None
    eta_s: float | None = None
    queue_position: int | None = None
    waiting_code: str = ""
    waiting_reason: str = ""
    error_code: str = ""
    error: str = ""
    actions: tuple = ()
    file_url: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def is_live(self):
        return self.status in (S.READY, S.RUNNING, S.PAUSED)

    @property
    def percent(self):
        return None if self.fraction is None else round(self.fraction * 100, 1)


def download_state(download, *, served_kinds=None):
    """Everything a page or the API shows about one download (a few queries while it waits)."""
    job = download.job if download.job_id else None
    status = download.current_status
    state = DownloadState(download=download, status=status,
                          status_label=str(S(status).label), actions=ACTIONS[S(status)])
    if job is not None:
        state.fraction = job.progress
        state.phase = job.phase
        figures = progress.decode(job.progress_message)
        state.bytes_done, state.bytes_total = figures.bytes_done, figures.bytes_total
        state.speed_bytes_s, state.eta_s = figures.speed_bytes_s, figures.eta_s
    if status == S.SUCCESSFUL:
        state.fraction = 1.0
        state.bytes_done = state.bytes_total = download.asset.size_bytes
        state.speed_bytes_s = state.eta_s = None
    elif status == S.PAUSED:
        state.speed_bytes_s = state.eta_s = None
    state.phase_label = str(PHASES.get(state.phase, state.phase))
    if status == S.READY and job is not None:
        standing = job_selectors.standing(job, served_kinds=served_kinds)
        state.queue_position = standing.position
        state.waiting_code = standing.reason
        state.waiting_reason = standing.message
    if status in (S.FAILED, S.CANCELLED) or (status == S.READY and job and job.error_code):
        # A queued job with an error is waiting to retry after it.
        if job is not None:
            state.error_code, detail = job_outcome(job)
        else:
            state.error_code, detail = download.error_code, download.error
        state.error = str(error_message(state.error_code, detail))
    if status == S.FAILED and not errors.retry_helps(state.error_code):
        state.actions = tuple(a for a in state.actions if a != "retry")
    if has_file(download):
        state.file_url = reverse("downloads:file", args=[download.pk])
    return state


def has_file(download):
    """Whether the download's file can be served: it finished, and housekeeping has not removed
    its asset's file since."""
    return download.current_status == S.SUCCESSFUL and storage.exists(download.asset.file)


def job_outcome(job):
    """(error code, detail) of a download's job as its owner reads them: a cancel by staff is
    told apart from the owner's own, with the reason staff gave."""
    reason = job_selectors.cancelled_by_other(job)
    if reason is not None:
        return STAFF_CANCEL, reason
    return job.error_code or "", job.error or ""


def served_kinds():
    """Kinds some live worker serves, read once for a whole list of downloads."""
    return job_selectors.live_kinds()


# --- Storage housekeeping ----------------------------------------------------------

CV_KINDS = ("downloads.segment", "downloads.analyze")
A = MediaAsset.State


def asset_busy(asset_id):
    """Why a live job (queued, running or paused) needs the asset's file, or "" when none does:
    a fetch or edit of it or an edit made from it (through their downloads, an indexed look-up),
    or a CV job of it (by payload: CV jobs hang off rows that a new segmentation replaces)."""
    wanted = Download.objects.filter(Q(asset_id=asset_id) | Q(asset__parent_id=asset_id)).live()
    if wanted.exists():
        return "live_job"
    if Job.objects.filter(kind__in=CV_KINDS, status__in=LIVE_STATUSES,
                          payload__asset=asset_id).exists():
        return "live_cv_job"
    return ""


def edit_waits_for(asset_id):
    """Whether an edit of the asset is being made, or may be asked for again (a download of it
    that has not got its file: failed, cancelled or evicted), so the asset's file must stay."""
    waiting = Download.objects.filter(asset=OuterRef("pk"))
    return MediaAsset.objects.filter(parent_id=asset_id).exclude(state=A.READY).filter(
        Q(state=A.DOWNLOADING) | Exists(waiting)).exists()


def unreferenced_assets():
    """Assets with files on disk that no download refers to, oldest first."""
    return MediaAsset.objects.filter(state=A.READY).exclude(
        Exists(Download.objects.filter(asset=OuterRef("pk")))).order_by("pk")


def used_at():
    """When an asset was last used: its last access, else when it became ready."""
    return Coalesce("last_accessed_at", "ready_at", "created_at")


def eviction_order():
    """Ready assets, least recently used first (ties by id), each with `used_at`."""
    return MediaAsset.objects.filter(state=A.READY).annotate(used_at=used_at()).order_by(
        "used_at", "pk")


def ready_bytes():
    """Bytes of finished files under MEDIA_ROOT, as the asset rows record them."""
    return MediaAsset.objects.filter(state=A.READY).aggregate(
        total=Sum("size_bytes"))["total"] or 0
