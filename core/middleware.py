from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.utils.translation import gettext as _

from core.tokens import unauthorized


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Every page needs a login, except those marked `@login_not_required`.

    The JSON API answers 401 instead of redirecting a script to a login form.
    """

    def handle_no_permission(self, request, view_func):
        if request.path.startswith("/api/"):
            return unauthorized(_("Log in or send an API token."))
        return super().handle_no_permission(request, view_func)
