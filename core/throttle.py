"""Throttles for what guesses passwords or sends mail: logging in and asking for a password reset.

A login counts against its account and against the client's address: past
LOGIN_THROTTLE_LIMIT failures of either within LOGIN_THROTTLE_WINDOW_SECONDS,
the next attempt is refused before its password is checked (the site's login
and the admin's). A password reset counts against the e-mail address and the
client's address (PASSWORD_RESET_THROTTLE_LIMIT per
PASSWORD_RESET_THROTTLE_WINDOW_SECONDS), refused before any mail goes. A
refusal is the form's error with HTTP 429.

Attempts are rows of core.Attempt: the database is the one store every
process of the site shares, on SQLite and PostgreSQL alike. Each attempt's
row is written before the rows are counted, in statements of their own, so
requests racing one another never all see room: the k-th row written sees
at least k.
"""

import hashlib
import ipaddress
from dataclasses import dataclass
from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext as _

from core.models import Attempt

REFUSED = "throttled"  # the code of a refusal's form error


@dataclass(frozen=True)
class Throttle:
    """At most `limit` counted attempts per key within `window` seconds (settings named
    `<setting>_LIMIT` and `<setting>_WINDOW_SECONDS`)."""

    setting: str
    default_limit: int
    default_window: float

    @property
    def limit(self):
        return int(getattr(settings, f"{self.setting}_LIMIT", self.default_limit))

    @property
    def window(self):
        return float(getattr(settings, f"{self.setting}_WINDOW_SECONDS", self.default_window))

    def take(self, **keys):
        """Count an attempt against each key (e.g. account=..., address=...; empty ones are
        skipped): a Ticket, or None when a key is past its limit (then nothing is counted)."""
        now = timezone.now()
        digests = [_digest(self.setting, name, value)
                   for name, value in sorted(keys.items()) if value]
        rows = Attempt.objects.bulk_create([Attempt(key=digest, at=now) for digest in digests])
        recent = Attempt.objects.filter(key__in=digests, at__gt=now - timedelta(seconds=self.window))
        counts = recent.values("key").annotate(n=Count("id"))
        ticket = Ticket(rows)
        if any(count["n"] > self.limit for count in counts):
            ticket.forget()
            return None
        _prune(now)
        return ticket


@dataclass(frozen=True)
class Ticket:
    rows: list

    def forget(self):
        """The attempt does not count (a login that succeeded)."""
        Attempt.objects.filter(pk__in=[row.pk for row in self.rows]).delete()


LOGIN = Throttle("LOGIN_THROTTLE", 10, 60.0)
PASSWORD_RESET = Throttle("PASSWORD_RESET_THROTTLE", 5, 3600.0)
THROTTLES = (LOGIN, PASSWORD_RESET)


def _digest(setting, name, value):
    return hashlib.sha256(f"{setting}:{name}:{value}".encode()).hexdigest()


def _prune(now):
    """Rows older than every window count for nothing any more."""
    horizon = max(throttle.window for throttle in THROTTLES)
    Attempt.objects.filter(at__lt=now - timedelta(seconds=horizon)).delete()


def client_address(request):
    """Who is asking, as a throttle counts them: the peer's address or, behind a proxy
    (BEHIND_PROXY), the one the proxy appended to X-Forwarded-For (what came before it, the
    client wrote). An IPv6 client is its /64, which one machine commonly holds whole."""
    if request is None:
        return ""
    text = request.META.get("REMOTE_ADDR", "")
    if getattr(settings, "BEHIND_PROXY", False):
        text = request.META.get("HTTP_X_FORWARDED_FOR", "").rsplit(",", 1)[-1].strip() or text
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text[:100]
    if address.version == 6:
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def _wait_words(throttle):
    seconds = round(throttle.window)
    if seconds < 120:
        return _("%(n)d seconds") % {"n": seconds}
    return _("%(n)d minutes") % {"n": round(seconds / 60)}


# --- Logins ------------------------------------------------------------------------------


class ThrottledLogin:
    """An AuthenticationForm whose password is checked only while the throttle has room;
    a failed check stays counted, a login that succeeds does not."""

    def clean(self):
        username = self.cleaned_data.get("username")
        if username is None or not self.cleaned_data.get("password"):
            return super().clean()
        ticket = LOGIN.take(account=username.casefold(), address=client_address(self.request))
        if ticket is None:
            raise ValidationError(
                _("Too many failed attempts to log in to this account or from this address. "
                  "Wait %(wait)s and try again.") % {"wait": _wait_words(LOGIN)}, code=REFUSED)
        cleaned = super().clean()
        ticket.forget()
        return cleaned


class LoginForm(ThrottledLogin, AuthenticationForm):
    pass


class AdminLoginForm(ThrottledLogin, AdminAuthenticationForm):
    pass


# --- Password resets ---------------------------------------------------------------------


class PasswordResetView(auth_views.PasswordResetView):
    """Django's password reset, refused before any mail goes once the throttle has no room."""

    def form_valid(self, form):
        ticket = PASSWORD_RESET.take(email=form.cleaned_data["email"].casefold(),
                                     address=client_address(self.request))
        if ticket is None:
            form.add_error("email", ValidationError(  # where the page shows errors
                _("Too many password resets were asked for this e-mail address or from this "
                  "address. Wait %(wait)s and try again.") % {"wait": _wait_words(PASSWORD_RESET)},
                code=REFUSED))
            return self.form_invalid(form)
        return super().form_valid(form)


# --- Views ---------------------------------------------------------------------------------


def answering_429(view):
    """`view`, its status 429 when a throttle refused its form."""

    @wraps(view)
    def answer(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        form = (getattr(response, "context_data", None) or {}).get("form")
        if form is not None and form.is_bound and _refused(form):
            response.status_code = 429
        return response

    return answer


def _refused(form):
    return any(error.code == REFUSED for errors in form.errors.as_data().values() for error in errors)


login = answering_429(auth_views.LoginView.as_view(authentication_form=LoginForm))
password_reset = answering_429(PasswordResetView.as_view())
