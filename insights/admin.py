"""Insights in the admin: read-only rows (they are written by requests and their jobs)."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from insights.models import Insight
from jobs.admin import admin_link, register_job_link

# A job's admin page names the insight it works for.
register_job_link("insights.", lambda job: Insight.objects.filter(job=job).first())


@admin.register(Insight)
class InsightAdmin(admin.ModelAdmin):
    list_display = ["kind", "subject", "owner", "status", "generator", "model", "generated_at",
                    "requested_at"]
    list_filter = ["kind", "status", "generator"]
    list_select_related = ["owner"]
    search_fields = ["subject", "owner__username"]
    ordering = ["-requested_at"]
    fields = ["id", "owner", "kind", "subject", "language", "status", "job_link", "generator",
              "model", "fingerprint", "generated_at", "requested_at", "created_at", "error_code",
              "error", "text"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False  # insights are requested by their owners' pages

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=_("job"))
    def job_link(self, insight):
        return admin_link(insight.job)
