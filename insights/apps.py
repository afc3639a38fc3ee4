from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InsightsConfig(AppConfig):
    """Insights: slow generations about a user's videos, shots and library, run on the engine."""

    name = "insights"
    verbose_name = _("Insights")

    def ready(self):
        from jobs import signals

        signals.job_finished.connect(_prefetch_after, dispatch_uid="insights.prefetch_after")


def _prefetch_after(sender, job, **kwargs):
    from insights import services

    services.prefetch_after_job(job)
