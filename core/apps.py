from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CoreConfig(AppConfig):
    """What every page stands on: accounts, API tokens, health."""

    name = "core"
    verbose_name = _("Site")
