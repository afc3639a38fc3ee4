"""An insight: one generated text per (user, kind, subject), derived from data with a fingerprint.

An Insight points at the Job that (re)generates it but keeps its own copy of
the final state, so old jobs can be pruned without touching what users see.
While the job exists, its row is the truth (`Insight.current_status`).
"""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class InsightKind(models.TextChoices):
    # Subject: a media asset the user holds; data: title, duration, description, shots, analysis.
    VIDEO_SUMMARY = "video_summary", _("Video summary")
    # Subject: one shot of such an asset; data: its analysis.
    SHOT_NOTES = "shot_notes", _("Shot notes")
    # Subject: the user's library ("library"); data: counts, durations, recent activity.
    LIBRARY_OVERVIEW = "library_overview", _("Library overview")


class InsightStatus(models.TextChoices):
    """The engine's states in lower case: the words of the JSON API."""

    READY = "ready", _("Queued")
    RUNNING = "running", _("Generating")
    PAUSED = "paused", _("Paused")
    SUCCESSFUL = "successful", _("Successful")  # the engine's word: one label per state everywhere
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


LIVE = (InsightStatus.READY, InsightStatus.RUNNING, InsightStatus.PAUSED)


class Generator(models.TextChoices):
    GATEWAY = "gateway", _("AI gateway")
    LOCAL = "local", _("Local generator")


class Insight(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="insights")
    kind = models.CharField(_("kind"), max_length=30, choices=InsightKind)
    subject = models.CharField(_("subject"), max_length=100)
    # The language of the page that asked last; the text is written in it.
    language = models.CharField(_("language"), max_length=20, default="en")
    text = models.TextField(_("text"), blank=True, default="")
    # Digest of the data (and language) the current text was made from.
    fingerprint = models.CharField(_("fingerprint"), max_length=64, blank=True, default="")
    generator = models.CharField(_("generator"), max_length=10, choices=Generator, blank=True,
                                 default="")
    model = models.CharField(_("model"), max_length=200, blank=True, default="")
    # SET_NULL: pruning old jobs leaves the insight and its final state intact.
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="+")
    # Written at request and when the job finishes; read only when there is no job.
    status = models.CharField(_("status"), max_length=10, choices=InsightStatus,
                              default=InsightStatus.READY)
    error_code = models.CharField(_("error code"), max_length=50, blank=True, default="")
    error = models.TextField(_("error"), blank=True, default="")
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    requested_at = models.DateTimeField(_("requested"), default=timezone.now)
    generated_at = models.DateTimeField(_("generated"), null=True, blank=True)

    class Meta:
        verbose_name = _("insight")
        verbose_name_plural = _("insights")
        ordering = ["-requested_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "kind", "subject"],
                                    name="insights_one_per_subject"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} · {self.subject}"

    @property
    def current_status(self):
        return self.job.status.lower() if self.job_id and self.job else self.status

    @property
    def is_live(self):
        return self.current_status in LIVE

    @property
    def job_kind(self):
        """The engine kind that generates insights of this kind."""
        return f"insights.{self.kind}"
