from django.contrib import admin

from jobs.models import ConcurrencyLimit, Job, JobEvent, Queue, Worker


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "actor", "reason", "attempt", "data"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "queue", "status", "priority", "position", "owner", "attempts",
                    "enqueued_at", "error_code"]
    list_filter = ["status", "queue", "kind"]
    search_fields = ["kind", "unique_key", "public_id"]
    raw_id_fields = ["owner", "worker"]
    inlines = [JobEventInline]


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ["name", "host", "pid", "role", "concurrency", "heartbeat_at", "stopped_at", "command"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ["name", "paused", "concurrency", "gap_seconds"]


@admin.register(ConcurrencyLimit)
class ConcurrencyLimitAdmin(admin.ModelAdmin):
    list_display = ["key", "limit"]
    search_fields = ["key"]
