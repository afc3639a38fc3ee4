from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InsightsConfig(AppConfig):
    """Insights: slow generations about a user's videos, shots and library, run on the engine."""

    name = "insights"
    verbose_name = _("Insights")

    def ready(self):
        from downloads import shots
        from insights.selectors import notes_held
        from jobs.selectors import standing as selectors

        selectors.describe_key("insights-user", _("Your other insights are being written."))
        # A shared video's shots are not found again under another holder's notes.
        if notes_held not in shots.SHOT_RESULTS:
            shots.SHOT_RESULTS.append(notes_held)
