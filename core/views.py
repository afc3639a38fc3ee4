from django.http import JsonResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.csrf import csrf_failure as html_csrf_failure


def home(request):
    return render(request, "core/home.html")


def csrf_failure(request, reason=""):
    """A script using the JSON API with a session gets JSON, not Django's HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"error": _("The CSRF check failed; send the X-CSRFToken header, or use an API token."),
             "error_code": "csrf_failed"}, status=403)
    return html_csrf_failure(request, reason)
