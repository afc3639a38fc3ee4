from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from jobs.exceptions import IllegalTransition
from subscriptions import services
from subscriptions.models import Entry, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["url", "owner", "format", "interval_s", "paused", "last_checked_at",
                    "last_outcome", "last_new", "last_requested", "last_left", "last_error_code",
                    "next_check_at"]
    list_filter = ["paused", "last_outcome", "format", "last_error_code"]
    search_fields = ["id", "url", "owner__username"]
    list_select_related = ["owner"]
    date_hierarchy = "created_at"
    # Changes go through the services (a pause cancels a queued check, a check is a job).
    readonly_fields = ["id", "owner", "url", "url_digest", "format", "interval_s", "paused",
                       "created_at", "next_check_at", "check_job", "last_checked_at",
                       "last_outcome", "last_listed", "last_new", "last_requested", "last_left",
                       "last_error_code", "last_error"]
    actions = ["check_now", "pause", "resume"]

    def has_add_permission(self, request):
        return False  # users subscribe on their page, where the address is checked

    def _each(self, request, queryset, service, done_message):
        done = 0
        for sub in queryset.select_related("owner"):
            try:
                service(sub)
                done += 1
            except IllegalTransition:
                continue
        self.message_user(request, done_message(done), messages.SUCCESS)

    @admin.action(description=_("Check the selected subscriptions now"), permissions=["change"])
    def check_now(self, request, queryset):
        self._each(request, queryset, services.check_now, lambda n: ngettext(
            "%(n)d check queued.", "%(n)d checks queued.", n) % {"n": n})

    @admin.action(description=_("Pause the selected subscriptions"), permissions=["change"])
    def pause(self, request, queryset):
        self._each(request, queryset.filter(paused=False), services.pause, lambda n: ngettext(
            "%(n)d subscription paused.", "%(n)d subscriptions paused.", n) % {"n": n})

    @admin.action(description=_("Resume the selected subscriptions"), permissions=["change"])
    def resume(self, request, queryset):
        self._each(request, queryset.filter(paused=True), services.resume, lambda n: ngettext(
            "%(n)d subscription resumed.", "%(n)d subscriptions resumed.", n) % {"n": n})

    def delete_model(self, request, obj):
        services.remove(obj)

    def delete_queryset(self, request, queryset):
        for sub in queryset:
            services.remove(sub)


@admin.register(Entry)
class EntryAdmin(admin.ModelAdmin):
    list_display = ["__str__", "subscription", "download", "seen_at"]
    search_fields = ["url", "title", "subscription__url", "subscription__owner__username"]
    list_select_related = ["subscription", "download"]
    readonly_fields = ["subscription", "key", "url", "title", "download", "seen_at"]

    def has_add_permission(self, request):
        return False
