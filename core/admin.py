from django.contrib import admin, messages
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from core.models import ApiToken
from jobs.admin.lists import FitsALaptop


@admin.register(ApiToken)
class ApiTokenAdmin(FitsALaptop, admin.ModelAdmin):
    """A token acts as its user: once made, whose it is and whether it was revoked stay as they
    are (revoking is an action, never undone). A new one is shown once, to whoever made it;
    staff make tokens for themselves, superusers for anyone."""

    list_display = ["key_prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "name", "key_prefix"]
    raw_id_fields = ["user"]
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["user", "name"] if request.user.is_superuser else ["name"]
        return ["key_prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["key_prefix", "user", "created_at", "last_used_at",
                                       "revoked_at"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        if not request.user.is_superuser:
            obj.user = request.user
        raw = obj.new_key()
        super().save_model(request, obj, form, change)
        self.message_user(request, _("The new token for %(user)s is %(key)s. Copy it now: it is "
                                     "not shown again.") % {"user": obj.user, "key": raw},
                          messages.WARNING)

    @admin.action(description=_("Revoke the selected tokens"), permissions=["change"])
    def revoke(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, ngettext("%(n)d token revoked.", "%(n)d tokens revoked.",
                                           revoked) % {"n": revoked}, messages.SUCCESS)
