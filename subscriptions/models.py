"""Subscriptions' tables: what a user follows (`Subscription`) and what its checks have already
taken from it (`Entry`).

A *check* lists a subscription's playlist or channel and requests downloads
of the entries it has no `Entry` for yet. An entry is remembered once a
download was requested for it (or it was refused for good), never when the
download queue was full: the next check asks for it again.
"""

import hashlib
import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from downloads.models import Format
from subscriptions import conf


def digest(url):
    """The key of a normalised URL (an index on long URLs could exceed PostgreSQL's row limit)."""
    return hashlib.sha256(url.encode()).hexdigest()


class Outcome(models.TextChoices):
    # No check has finished yet.
    NONE = "", _("Not checked yet")
    # The listing was read; `last_new` / `last_requested` / `last_left` say what it found.
    OK = "ok", _("Checked")
    # The listing could not be read; `last_error_code` / `last_error` say why.
    FAILED = "failed", _("Failed")


class SubscriptionQuerySet(models.QuerySet):
    def active(self):
        return self.filter(paused=False)

    def due(self, now=None):
        """Active subscriptions whose next check time has come (served by `subscriptions_due`)."""
        return self.active().filter(next_check_at__lte=now or timezone.now())


class Subscription(models.Model):
    """A user's standing request: check this playlist or channel every `interval_s` seconds and
    download what is new, in `format`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="subscriptions")
    url = models.TextField(_("address"))  # normalised by downloads.addresses
    url_digest = models.CharField(max_length=64, editable=False)
    format = models.CharField(_("format"), max_length=10, choices=Format)
    # The bounds are settings, read when a value is validated.
    interval_s = models.PositiveIntegerField(_("interval (s)"), validators=[
        MinValueValidator(conf.min_interval_s), MaxValueValidator(conf.max_interval_s)])
    paused = models.BooleanField(_("paused"), default=False)
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    # Moved forward by whoever enqueues the check (scheduled.check_due, check_now), in the
    # same transaction, so two schedulers never both enqueue one round.
    next_check_at = models.DateTimeField(_("next check"), default=timezone.now)
    # The latest check, queued, running or finished; SET_NULL so pruning jobs loses nothing.
    check_job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    # What the latest finished check found (or why it failed).
    last_checked_at = models.DateTimeField(_("last check"), null=True, blank=True)
    last_outcome = models.CharField(_("last outcome"), max_length=10, choices=Outcome,
                                    blank=True, default=Outcome.NONE)
    last_listed = models.PositiveIntegerField(_("entries listed"), default=0)
    last_new = models.PositiveIntegerField(_("new entries"), default=0)
    last_requested = models.PositiveIntegerField(_("downloads requested"), default=0)
    # New entries not requested because the owner's download queue was full.
    last_left = models.PositiveIntegerField(_("left for the next check"), default=0)
    last_error_code = models.CharField(_("error code"), max_length=50, blank=True, default="")
    last_error = models.TextField(_("error"), blank=True, default="")

    objects = SubscriptionQuerySet.as_manager()

    class Meta:
        verbose_name = _("subscription")
        verbose_name_plural = _("subscriptions")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "url_digest", "format"],
                                    name="subscriptions_unique_per_owner"),
        ]
        indexes = [
            # check_due() runs every minute or so: only active rows, in due order.
            models.Index(fields=["next_check_at"], condition=Q(paused=False),
                         name="subscriptions_due"),
        ]

    def __str__(self):
        return self.url


class Entry(models.Model):
    """One entry of a subscription's listing that its checks have dealt with (never again)."""

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE,
                                     related_name="entries")
    key = models.CharField(max_length=64, editable=False)  # digest() of the normalised URL
    url = models.TextField(_("address"))
    title = models.CharField(_("title"), max_length=500, blank=True, default="")
    # SET_NULL: a user deleting the download must not make the next check fetch it again.
    # Empty too for an entry refused for good (an address downloads will not take).
    download = models.ForeignKey("downloads.Download", null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    seen_at = models.DateTimeField(_("seen"), default=timezone.now)

    class Meta:
        verbose_name = _("entry")
        verbose_name_plural = _("entries")
        ordering = ["-seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["subscription", "key"], name="subscriptions_entry_once"),
        ]

    def __str__(self):
        return self.title or self.url
