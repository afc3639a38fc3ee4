"""Insights in the admin: read-only rows (they are written by requests and their jobs)."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from insights.models import Generator, Insight
from jobs.admin import admin_link, register_job_link
from jobs.admin.lists import FitsALaptop

# A job's admin page names the insight it works for.
register_job_link("insights.", lambda job: Insight.objects.filter(job=job).first())


@admin.register(Insight)
class InsightAdmin(FitsALaptop, admin.ModelAdmin):
    # What staff scan fits a laptop; the model and the times are on the insight's page.
    list_display = ["kind", "subject", "owner", "status", "written_by", "requested_at"]
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

    @admin.display(description=_("written by"), ordering="generator")
    def written_by(self, insight):
        """The model that wrote it, or the local generator (as the user's own list says)."""
        if insight.generator == Generator.GATEWAY:
            return insight.model
        return insight.get_generator_display() or "—"

    @admin.display(description=_("job"))
    def job_link(self, insight):
        return admin_link(insight.job)
