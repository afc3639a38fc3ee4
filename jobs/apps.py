from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobsConfig(AppConfig):
    """The engine: one Job table, its lifecycle, workers and transports."""

    name = "jobs"
    verbose_name = _("Jobs")
