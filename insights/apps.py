from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InsightsConfig(AppConfig):
    """Insights: slow generations about a user's videos, shots and library, run on the engine."""

    name = "insights"
    verbose_name = _("Insights")

    def ready(self):
        from jobs import selectors

        selectors.describe_key("insights-user", _("Your other insights are being written."))
