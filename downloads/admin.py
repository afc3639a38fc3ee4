from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from downloads import progress, services
from downloads.models import Download, DownloadQuota, DownloadStatus, MediaAsset
from downloads.templatetags.downloads_tags import seconds
from jobs.admin import register_job_link, register_progress_words
from jobs.admin.lists import FitsALaptop
from jobs.exceptions import IllegalTransition

# A download's progress message carries its figures as JSON (downloads/progress.py).
register_progress_words("downloads.", progress.describe)
register_job_link("downloads.fetch", lambda job: Download.objects.filter(job=job).first())
register_job_link("downloads.edit", lambda job: Download.objects.filter(job=job).first())


@admin.register(MediaAsset)
class MediaAssetAdmin(FitsALaptop, admin.ModelAdmin):
    # Sizes and lengths in words keep their columns narrow; when it became ready is on the
    # asset's page, the last access (what eviction goes by) stays in the list.
    list_display = ["id", "title", "format", "edit", "state", "size", "length",
                    "last_accessed_at"]
    list_filter = ["state", "format"]
    search_fields = ["title", "url"]
    readonly_fields = ["url", "url_digest", "format", "parent", "edit", "state", "holder", "file",
                       "size_bytes", "duration_s", "metadata", "error_code", "error", "created_at",
                       "ready_at", "last_accessed_at", "segment_job"]
    actions = ["evict_assets"]

    def has_add_permission(self, request):
        return False  # an asset is made by the downloads that ask for its address

    @admin.display(description=_("size"), ordering="size_bytes")
    def size(self, asset):
        return filesizeformat(asset.size_bytes) if asset.size_bytes is not None else None

    @admin.display(description=_("length"), ordering="duration_s")
    def length(self, asset):
        return seconds(asset.duration_s) or None

    @admin.action(description=_("Evict the selected assets' files (they are fetched again "
                                "when asked for)"), permissions=["change"])
    def evict_assets(self, request, queryset):
        # Per asset through the service: it skips files a live job or a player still uses.
        outcomes = [services.asset_evict(pk) for pk in
                    queryset.filter(state=MediaAsset.State.READY).values_list("pk", flat=True)]
        evicted = outcomes.count("evicted")
        self.message_user(request, ngettext(
            "%(n)d asset evicted.", "%(n)d assets evicted.", evicted) % {"n": evicted},
            messages.SUCCESS)
        if len(outcomes) > evicted:
            self.message_user(request, _(
                "%(n)d kept: a job or a player is using them, or they changed meanwhile.") % {
                    "n": len(outcomes) - evicted}, messages.WARNING)


CONFIRM_SAMPLE = 20  # downloads a confirmation page names; the rest are counted


class CancelForm(forms.Form):
    reason = forms.CharField(label=_("Reason (optional, shown to each download's owner)"),
                             required=False, max_length=500)


@admin.register(Download)
class DownloadAdmin(FitsALaptop, admin.ModelAdmin):
    # The id is on the download's page and found by the search; the list keeps its width for
    # what staff scan (whose, what, how it ended).
    list_display = ["__str__", "owner", "current_status", "error_code", "created_at"]
    list_filter = ["status", "asset__format"]
    search_fields = ["id", "owner__username", "name", "asset__title", "asset__url"]
    list_select_related = ["owner", "asset", "job"]
    # Whose it is and what it fetched change only through the services (the actions).
    readonly_fields = ["owner", "asset", "job", "status", "error_code", "error", "created_at",
                       "finished_at"]
    actions = ["cancel_downloads", "retry_downloads"]

    def has_add_permission(self, request):
        return False  # users submit downloads on their pages, where quotas and egress are checked

    @admin.display(description=_("status"))
    def current_status(self, obj):
        return DownloadStatus(obj.current_status).label  # in words, as on the user's own list

    def _each(self, request, queryset, service, done_message, **options):
        done = 0
        for download in queryset.select_related("job", "asset", "owner"):
            try:
                service(download, actor=request.user, **options)
                done += 1
            except (IllegalTransition, services.QueueFull):
                continue
        self.message_user(request, done_message(done), messages.SUCCESS)

    @admin.action(description=_("Cancel the selected downloads"), permissions=["change"])
    def cancel_downloads(self, request, queryset):
        # It throws away work people asked for: a page asks first and takes a reason, which each
        # owner reads on their row; that page posts the same action again with confirm=yes.
        form = CancelForm(request.POST if request.POST.get("confirm") == "yes" else None)
        if not form.is_valid():
            return TemplateResponse(request, "admin/downloads/download/cancel_confirmation.html", {
                **self.admin_site.each_context(request),
                "title": _("Cancel the selected downloads"),
                "opts": self.model._meta,
                "form": form,
                "downloads": [(download, self.current_status(download)) for download in
                              queryset.select_related("asset", "owner", "job")[:CONFIRM_SAMPLE]],
                "selected_count": queryset.count(),
                "selected_ids": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "select_across": request.POST.get("select_across", "0"),
            })
        self._each(request, queryset, services.download_cancel, lambda n: ngettext(
            "%(n)d download cancelled.", "%(n)d downloads cancelled.", n) % {"n": n},
            reason=form.cleaned_data["reason"])

    @admin.action(description=_("Retry the selected downloads"), permissions=["change"])
    def retry_downloads(self, request, queryset):
        self._each(request, queryset, services.download_retry, lambda n: ngettext(
            "%(n)d download queued again.", "%(n)d downloads queued again.", n) % {"n": n})


@admin.register(DownloadQuota)
class DownloadQuotaAdmin(FitsALaptop, admin.ModelAdmin):
    list_display = ["user", "max_concurrent", "max_queued", "max_concurrent_cv", "max_queued_cv",
                    "storage_bytes", "unlimited"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]

    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj is not None else []  # a quota is its user's; make another instead

    def save_model(self, request, obj, form, change):
        # Through the service: the user's concurrency key must get the new limit too.
        services.quota_save(obj)
