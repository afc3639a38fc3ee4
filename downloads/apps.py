from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DownloadsConfig(AppConfig):
    """Users' downloads: shared media assets, quotas, the fetch and edit jobs, pages and API."""

    name = "downloads"
    verbose_name = _("Downloads")

    def ready(self):
        from jobs import selectors, signals

        # How a full concurrency key of ours reads where a download waits.
        selectors.describe_key("user", _("Your other downloads are running."))
        selectors.describe_key("asset", _("The same video is downloading for someone else."))
        signals.job_finished.connect(_copy_outcome, dispatch_uid="downloads.copy_outcome")


def _copy_outcome(sender, job, **kwargs):
    from downloads import services

    if job.kind in services.KINDS:
        services.download_record_outcome(job)
