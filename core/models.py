import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "hlg_"


def hash_token(raw):
    # Tokens are long random strings, so one round of SHA-256 is enough: there
    # is nothing to brute-force, and a lookup by hash stays a single index hit.
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class ApiToken(models.Model):
    """A bearer token for scripts; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100, blank=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    # The first characters, shown so a person can tell their tokens apart.
    key_prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self):
        return f"{self.key_prefix}… ({self.user})"

    @classmethod
    def issue(cls, *, user, name=""):
        """Create a token and return (token, raw key); the raw key is never stored."""
        token = cls(user=user, name=name)
        raw = token.new_key()
        token.save()
        return token, raw

    def new_key(self):
        """Give this unsaved token a fresh key and return it raw: only its hash is kept."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.key_hash, self.key_prefix = hash_token(raw), raw[:12]
        return raw


class Attempt(models.Model):
    """One attempt a throttle counted (core/throttle.py): a failed login, a password reset
    asked for. `key` is a digest of what it counted against (an account, an address, an
    e-mail address), so no typed name or password-like text is kept."""

    key = models.CharField(max_length=64)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["key", "at"]), models.Index(fields=["at"])]
        verbose_name = _("throttled attempt")
        verbose_name_plural = _("throttled attempts")

    def __str__(self):
        return f"{self.key[:12]}… at {self.at:%Y-%m-%d %H:%M:%S}"
