from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SubscriptionsConfig(AppConfig):
    """Playlists and channels users follow: checked on a schedule, new entries downloaded."""

    name = "subscriptions"
    verbose_name = _("Subscriptions")

    def ready(self):
        from jobs import selectors, signals

        selectors.describe_key("subscriber", _("Your other subscriptions are being checked."))
        signals.job_finished.connect(_record_failure, dispatch_uid="subscriptions.record_failure")


def _record_failure(sender, job, **kwargs):
    from subscriptions import services

    services.record_job_failure(job)
