"""Downloads' tables: the shared file (`MediaAsset`), a user's request for it (`Download`) and
what a user may hold (`DownloadQuota`).

A Download points at its Job but keeps its own copy of the final state, so
finished jobs can be pruned without touching what users see. While the job is
live, its row is the truth (`Download.current_status`).
"""

import hashlib
import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from downloads import conf
from jobs.bounds import LIMIT_MAX

# A limit nobody reaches: an unlimited user's concurrency, a ready asset's key.
UNLIMITED = LIMIT_MAX
MAX_QUEUED = 100_000  # the most downloads a quota may let one user queue


def url_digest(url):
    """The key two submissions of one normalised URL share (an index on the URL itself could
    exceed PostgreSQL's B-tree row limit for long URLs)."""
    return hashlib.sha256(url.encode()).hexdigest()


class Format(models.TextChoices):
    BEST = "best", _("Best quality (video and audio)")
    P720 = "720p", _("Video up to 720p")
    AUDIO = "audio", _("Audio only")


class MediaAsset(models.Model):
    """One file on disk that any number of users' downloads share (de-duplicated by URL and
    format, or, for an edit, by its parent and the edit)."""

    class State(models.TextChoices):
        # Not on disk. In: creation; a stopped or failed fetch. A paused fetch
        # leaves its partial in staging/<id>/ for whichever fetch comes next.
        PENDING = "pending", _("Not downloaded yet")
        # One attempt holds it (`holder` is that attempt's lease token) and fetches it.
        # Out: READY, or back to PENDING / ERROR when that attempt ends.
        DOWNLOADING = "downloading", _("Downloading")
        # The file is in place under MEDIA_ROOT (`file`).
        READY = "ready", _("Ready")
        # The last fetch failed for good; the next request for it tries again.
        ERROR = "error", _("Failed")

    url = models.TextField(_("address"))  # normalised; a derived asset repeats its parent's
    url_digest = models.CharField(max_length=64, editable=False)
    format = models.CharField(_("format"), max_length=10, choices=Format)
    # Set on an edit of another asset: `edit` says what was done to it.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="derived")
    edit = models.CharField(_("edit"), max_length=100, blank=True, default="")
    state = models.CharField(_("state"), max_length=12, choices=State, default=State.PENDING)
    holder = models.UUIDField(null=True, blank=True, editable=False)
    title = models.CharField(_("title"), max_length=500, blank=True, default="")
    duration_s = models.FloatField(_("duration (s)"), null=True, blank=True)
    size_bytes = models.BigIntegerField(_("size (bytes)"), null=True, blank=True)
    file = models.CharField(_("file"), max_length=300, blank=True, default="")  # under MEDIA_ROOT
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    error_code = models.CharField(_("error code"), max_length=50, blank=True, default="")
    error = models.TextField(_("error"), blank=True, default="")
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    ready_at = models.DateTimeField(_("ready"), null=True, blank=True)
    last_accessed_at = models.DateTimeField(_("last access"), null=True, blank=True)
    # The latest segmentation into shots (a CV job); SET_NULL so pruning jobs keeps the shots.
    segment_job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")

    class Meta:
        verbose_name = _("media asset")
        verbose_name_plural = _("media assets")
        constraints = [
            models.UniqueConstraint(fields=["url_digest", "format"], condition=Q(parent__isnull=True),
                                    name="downloads_asset_unique_source"),
            models.UniqueConstraint(fields=["parent", "edit"], condition=Q(parent__isnull=False),
                                    name="downloads_asset_unique_edit"),
        ]

    def __str__(self):
        return self.title or self.url

    @property
    def concurrency_key(self):
        return f"asset:{self.pk}"

    @property
    def is_video(self):
        return self.format != Format.AUDIO and self.edit != "audio"


class DownloadStatus(models.TextChoices):
    """The engine's states in lower case, and one of the download's own: the words of the JSON
    API."""

    READY = "ready", _("Queued")
    RUNNING = "running", _("Downloading")
    PAUSED = "paused", _("Paused")
    SUCCESSFUL = "successful", _("Successful")  # the engine's word: one label per state everywhere
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    # Not an engine state: it had finished, then storage housekeeping deleted the
    # file to make room (the job is detached). Out: "download again" (a retry).
    EVICTED = "evicted", _("Evicted")


LIVE = (DownloadStatus.READY, DownloadStatus.RUNNING, DownloadStatus.PAUSED)


class DownloadQuerySet(models.QuerySet):
    def live(self):
        """Queued, running or paused: from the job while there is one, else the stored copy."""
        return self.filter(
            Q(job__isnull=False, job__status__in=[s.upper() for s in LIVE])
            | Q(job__isnull=True, status__in=LIVE)
        )

    def successful(self):
        return self.filter(Q(job__status="SUCCESSFUL") | Q(status=DownloadStatus.SUCCESSFUL))


class Download(models.Model):
    """A user's request for an asset; its public id is the only one users see."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="downloads")
    asset = models.ForeignKey(MediaAsset, on_delete=models.PROTECT, related_name="downloads")
    name = models.CharField(_("name"), max_length=200, blank=True, default="")
    # SET_NULL: pruning old jobs leaves the download and its final state intact.
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="+")
    # Written when the job finishes (and for a download served from the cache
    # without a job); read only when there is no job.
    status = models.CharField(_("status"), max_length=10, choices=DownloadStatus,
                              default=DownloadStatus.READY)
    error_code = models.CharField(_("error code"), max_length=50, blank=True, default="")
    error = models.TextField(_("error"), blank=True, default="")
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    objects = DownloadQuerySet.as_manager()

    class Meta:
        verbose_name = _("download")
        verbose_name_plural = _("downloads")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="downloads_owner_recent")]

    def __str__(self):
        return self.name or str(self.asset)

    @property
    def current_status(self):
        return self.job.status.lower() if self.job_id else self.status

    @property
    def is_live(self):
        return self.current_status in LIVE


class DownloadQuota(models.Model):
    """What one user may do; a user without a row has the settings' defaults."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, primary_key=True,
                                on_delete=models.CASCADE, related_name="download_quota")
    max_concurrent = models.PositiveIntegerField(
        _("downloads running at once"), default=conf.default_concurrent,
        validators=[MaxValueValidator(UNLIMITED)])
    max_queued = models.PositiveIntegerField(
        _("downloads queued, running or paused"), default=conf.default_queued,
        validators=[MaxValueValidator(MAX_QUEUED)])
    storage_bytes = models.PositiveBigIntegerField(
        _("storage (bytes)"), default=conf.default_storage_bytes)
    max_concurrent_cv = models.PositiveIntegerField(
        _("CV jobs running at once"), default=conf.cv_concurrent,
        validators=[MaxValueValidator(UNLIMITED)],
        help_text=_("Shot detection and shot analyses of this user's videos."))
    max_queued_cv = models.PositiveIntegerField(
        _("CV jobs queued, running or paused"), default=conf.cv_queued,
        validators=[MaxValueValidator(MAX_QUEUED)])
    unlimited = models.BooleanField(
        _("unlimited"), default=False,
        help_text=_("No caps at all: concurrency, queue, rate or storage."))

    class Meta:
        verbose_name = _("download quota")
        verbose_name_plural = _("download quotas")

    def __str__(self):
        return str(self.user)

    @property
    def concurrency_key(self):
        return f"user:{self.user_id}"

    @property
    def concurrency_limit(self):
        return UNLIMITED if self.unlimited else max(1, self.max_concurrent)

    @property
    def cv_key(self):
        return f"cv-user:{self.user_id}"

    @property
    def cv_limit(self):
        return UNLIMITED if self.unlimited else max(1, self.max_concurrent_cv)



class Shot(models.Model):
    """One shot of a video asset, found by segmentation; shared by everyone holding the asset.

    Times are seconds from the start of the video; `end_s` is exclusive (the
    first frame of the next shot). Image paths are relative to MEDIA_ROOT.
    """

    asset = models.ForeignKey(MediaAsset, on_delete=models.CASCADE, related_name="shots")
    index = models.PositiveIntegerField(_("index"))
    start_s = models.FloatField(_("start (s)"))
    end_s = models.FloatField(_("end (s)"))
    start_frame = models.PositiveIntegerField(default=0)
    end_frame = models.PositiveIntegerField(default=0)
    thumbnail = models.CharField(_("thumbnail"), max_length=300, blank=True, default="")
    # What the analysis measured (brightness, motion over time, colours, keyframe strip).
    analysis = models.JSONField(_("analysis"), null=True, blank=True)
    analysis_job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")

    class Meta:
        verbose_name = _("shot")
        verbose_name_plural = _("shots")
        ordering = ["asset", "index"]
        constraints = [models.UniqueConstraint(fields=["asset", "index"],
                                               name="downloads_shot_unique_index")]

    def __str__(self):
        return f"{self.asset} #{self.index}"

    @property
    def duration_s(self):
        return self.end_s - self.start_s
