from django.contrib import admin

from core.models import ApiToken
from jobs.admin_lists import FitsALaptop


@admin.register(ApiToken)
class ApiTokenAdmin(FitsALaptop, admin.ModelAdmin):
    list_display = ["key_prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "name", "key_prefix"]
    readonly_fields = ["key_prefix", "created_at", "last_used_at"]
    raw_id_fields = ["user"]
