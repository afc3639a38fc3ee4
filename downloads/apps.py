from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DownloadsConfig(AppConfig):
    """Users' downloads: shared media assets, quotas, the fetch and edit jobs, pages and API."""

    name = "downloads"
    verbose_name = _("Downloads")

    def ready(self):
        from jobs.selectors import standing as selectors

        # How a full concurrency key of ours reads where a download waits.
        selectors.describe_key("user", _("Your other downloads are running."))
        selectors.describe_key("asset", _("The same video is downloading for someone else."))
        selectors.describe_key("site", _("Other downloads from the same site are running."))
        selectors.describe_key("cv-user", _("Your other shot detections and analyses are running."))
