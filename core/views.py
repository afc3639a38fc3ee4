from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views import defaults
from django.views.csrf import csrf_failure as html_csrf_failure
from django.views.decorators.http import require_GET

from core import selectors
from core.jsonapi import error
from core.tokens import unauthorized


def _home_context(request):
    home = selectors.home_of(request.user)
    return {"home": home, "sample_url": selectors.sample_url() if home.empty else None}


def home(request):
    return render(request, "core/home.html", _home_context(request))


@require_GET
def home_jobs(request):
    """The home page's job list, which polls itself while a job on it is live: the list of a
    user whose jobs have all ended comes back without its polling trigger, so htmx stops."""
    return render(request, "core/_jobs.html", _home_context(request))


def _is_api(request):
    return request.path_info.startswith("/api/")


def csrf_failure(request, reason=""):
    """A script using the JSON API gets JSON, not Django's HTML page: 401 when it is not
    logged in at all (as for a GET), 403 when its session lacks the CSRF token."""
    if not _is_api(request):
        return html_csrf_failure(request, reason)
    if not request.user.is_authenticated:
        return unauthorized(_("Log in or send an API token."))
    return error(403, "csrf_failed",
                 _("The CSRF check failed; send the X-CSRFToken header, or use an API token."))


# Django's error pages, in JSON under /api/ (project/urls.py names them).

def bad_request(request, exception):
    if _is_api(request):
        return error(400, "bad_request", _("The request is malformed."))
    return defaults.bad_request(request, exception)


def permission_denied(request, exception):
    if _is_api(request):
        return error(403, "forbidden", _("You may not do this."))
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception):
    if _is_api(request):
        return error(404, "not_found", _("No such address in the API."))
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _is_api(request):
        return error(500, "server_error", _("Something went wrong on the server; try again later."))
    return defaults.server_error(request)
