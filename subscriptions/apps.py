from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SubscriptionsConfig(AppConfig):
    """Playlists and channels users follow: checked on a schedule, new entries downloaded."""

    name = "subscriptions"
    verbose_name = _("Subscriptions")

    def ready(self):
        from jobs.selectors import standing as selectors

        selectors.describe_key("subscriber", _("Your other subscriptions are being checked."))
