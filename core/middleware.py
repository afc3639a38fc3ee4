from django.contrib.admin.options import TO_FIELD_VAR
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.utils.translation import gettext as _

from core.tokens import unauthorized
from core.views import bad_request


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Every page needs a login, except those marked `@login_not_required`.

    The JSON API answers 401 instead of redirecting a script to a login form.
    """

    def handle_no_permission(self, request, view_func):
        if request.path.startswith("/api/"):
            return unauthorized(_("Log in or send an API token."))
        return super().handle_no_permission(request, view_func)


class RefuseMalformedMiddleware:
    """Two requests no view can answer are refused with 400 before any view.

    - A NUL character in the path or the query string: PostgreSQL stores no
      NUL, so any lookup with one fails at the driver (an admin search for
      "%00", a queue named "%00"). Forms already refuse it in bodies (Django's
      CharField), which this leaves to them.
    - An empty `_to_field` on an admin page: Django's admin looks it up as a
      field named "" and raises FieldDoesNotExist (a 500) on every change and
      delete page; a to_field it does not allow is already its own 400.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path_info or any(
                "\x00" in text for key, values in request.GET.lists() for text in (key, *values)):
            return bad_request(request, None)
        if request.path_info.startswith("/admin/") and "" in (
                request.GET.get(TO_FIELD_VAR), request.POST.get(TO_FIELD_VAR)):
            return bad_request(request, None)
        return self.get_response(request)
