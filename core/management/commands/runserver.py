"""`runserver` whose static files answer a hostile path (`/static/%2e%2e/...`) with 400.

Django's development static handler turns only Http404 into a response; the
SuspiciousFileOperation a path out of the static folders raises would reach
the server as a traceback and a 500.
"""

from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.contrib.staticfiles.management.commands.runserver import Command as StaticRunserver
from django.core.exceptions import SuspiciousOperation
from django.core.handlers.exception import response_for_exception


class GuardedStaticFilesHandler(StaticFilesHandler):
    def get_response(self, request):
        try:
            return super().get_response(request)
        except SuspiciousOperation as exc:
            return response_for_exception(request, exc)


class Command(StaticRunserver):
    def get_handler(self, *args, **options):
        handler = super().get_handler(*args, **options)
        if isinstance(handler, StaticFilesHandler):
            return GuardedStaticFilesHandler(handler.application)
        return handler
