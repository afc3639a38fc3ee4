"""Bearer-token authentication for the JSON API."""

from django.http import JsonResponse
from django.utils.translation import gettext as _

from core.models import ApiToken, hash_token


def unauthorized(message):
    response = JsonResponse({"error": message, "error_code": "unauthorized"}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="haulage"'
    return response


class BearerTokenMiddleware:
    """`Authorization: Bearer <token>` logs a JSON API request in as the token's user.

    Only under /api/: a token is made for scripts, so it never opens the admin
    or a page (where it would also skip the CSRF check that protects them);
    elsewhere the header is ignored. A request that presents a token is judged
    by it alone: a wrong or revoked token is a 401 even when a session cookie
    rides along, so a script never silently acts as whoever last used the browser.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        header = request.headers.get("Authorization", "")
        if not header.lower().startswith("bearer ") or not request.path_info.startswith("/api/"):
            return self.get_response(request)
        raw = header[7:].strip()
        token = (
            ApiToken.objects.active().select_related("user").filter(key_hash=hash_token(raw)).first()
            if raw
            else None
        )
        if token is None:
            return unauthorized(_("The API token is missing, wrong or revoked."))
        request.user = token.user
        request.api_token = token
        # CSRF protects cookies; a bearer token is not sent by a browser on its own.
        request._dont_enforce_csrf_checks = True
        return self.get_response(request)
