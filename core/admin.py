from django.contrib import admin

from core.models import ApiToken


class FitsALaptop:
    """For Haulage's own lists: long names wrap instead of widening the table beyond a laptop's
    screen (static/css/admin-lists.css)."""

    class Media:
        css = {"all": ["css/admin-lists.css"]}


@admin.register(ApiToken)
class ApiTokenAdmin(FitsALaptop, admin.ModelAdmin):
    list_display = ["key_prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "name", "key_prefix"]
    readonly_fields = ["key_prefix", "created_at", "last_used_at"]
    raw_id_fields = ["user"]
