"""The queue's control room in Django's admin.

Every action narrows the selection to the states where it is legal and calls
the service (jobs/services.py) once per job: the admin never writes a status
itself, and each action is recorded as a JobEvent with who and why. Each
family of actions has its own permission (see Job.Meta.permissions), so
staff with `view_job` alone see everything and change nothing.

The pages that are not a model's list (up next, queues, workers) live in
jobs/admin/views.py and are routed here, under the Job admin.
"""

import re
import uuid
from dataclasses import dataclass
from functools import cached_property, update_wrapper

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import ActionLocation
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Max
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.translation import gettext, ngettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from jobs import services
from jobs.admin import filters as admin_filters
from jobs.admin import views as admin_views
from jobs.engine import dependencies, limits, order, registry
from jobs.exceptions import IllegalTransition, InvalidPriority
from jobs.models import (
    CLAIM_ORDER,
    PRIORITY_MAX,
    PRIORITY_MIN,
    ConcurrencyLimit,
    Job,
    Outcome,
    Queue,
    RateLimit,
    Worker,
)
from jobs.selectors import standing as selectors
from jobs.selectors.present import KindPrefixes

# --- Redaction ----------------------------------------------------------------

SECRET_KEY_PATTERN = re.compile(r"token|secret|password|key|cookie|authorization", re.IGNORECASE)
REDACTED = "[redacted]"


def redact(value):
    """`value` with the values under secret-looking keys replaced, at any depth."""
    if isinstance(value, dict):
        return {k: REDACTED if SECRET_KEY_PATTERN.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


# --- Links to the domain object a job works for -----------------------------------

_job_links = KindPrefixes()  # kind prefix -> resolver(job) -> model instance or None


def register_job_link(kind_prefix, resolver):
    """Show the object a job works for on its admin page.

    `resolver(job)` returns a model instance (linked to its admin page when it
    has one) or None; the longest prefix matching the job's kind is used:

        register_job_link("downloads.", lambda job: Download.objects.filter(job=job).first())
    """
    _job_links.register(kind_prefix, resolver)


def linked_object(job):
    resolver = _job_links.lookup(job.kind)
    return resolver(job) if resolver is not None else None


def admin_link(obj):
    """HTML for `obj`: a link to its admin page when its model has one, else its name."""
    if obj is None:
        return "—"
    opts = obj._meta
    label = str(obj)
    if admin.site.is_registered(type(obj)):
        try:
            url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
        except NoReverseMatch:
            pass
        else:
            return format_html('<a href="{}">{}</a>', url, label)
    return format_html("{}", label)


# --- Actions ----------------------------------------------------------------------------

PRIORITY_TIERS = [
    (100, _("Urgent (100)")),
    (50, _("High (50)")),
    (10, _("Interactive (10)")),
    (0, _("Normal (0)")),
    (-10, _("Prefetch (-10)")),
    (-50, _("Low (-50)")),
    (-100, _("Background (-100)")),
]


@dataclass(frozen=True)
class JobAction:
    """One thing staff can do to jobs: which states allow it, who may, and the service it calls."""

    name: str
    label: str
    permission: str  # a Job permission codename (Job.Meta.permissions)
    legal: tuple
    service: object
    done: object  # ngettext_lazy(singular, plural, "n"): what changed, for %(n)d jobs
    order: tuple = ("pk",)  # the order a bulk use goes through the jobs in
    needs_priority: bool = False
    # It throws away work someone asked for: always confirmed, even for one job, with a
    # reason the job's owner is shown.
    discards: bool = False

    def run(self, job, *, actor, reason, priority=None):
        """True when the job changed; False when it already stood where asked."""
        if self.needs_priority:
            return self.service(job, priority, actor=actor, reason=reason) is not False
        return self.service(job, actor=actor, reason=reason) is not False


# Each action is offered on the jobs services.LEGAL allows it for (jobs/engine/actions.py).
LEGAL = services.LEGAL
ACTIONS = {
    action.name: action
    for action in [
        # Moving to the front goes back to front, so a selection keeps its own order.
        JobAction("move_to_front", _("Move to front"), "can_reorder", LEGAL["move_to_front"], services.move_to_front,
                  ngettext_lazy("Moved %(n)d job to the front.", "Moved %(n)d jobs to the front.", "n"),
                  order=order.REVERSED),
        JobAction("move_up", _("Move up"), "can_reorder", LEGAL["move_up"], services.move_up,
                  ngettext_lazy("Moved %(n)d job up.", "Moved %(n)d jobs up.", "n"),
                  order=CLAIM_ORDER),
        JobAction("move_down", _("Move down"), "can_reorder", LEGAL["move_down"], services.move_down,
                  ngettext_lazy("Moved %(n)d job down.", "Moved %(n)d jobs down.", "n"),
                  order=order.REVERSED),
        JobAction("set_priority_tier", _("Set priority tier"), "can_reorder", LEGAL["set_priority_tier"],
                  services.set_priority_tier,
                  ngettext_lazy("Changed the priority of %(n)d job.",
                                "Changed the priority of %(n)d jobs.", "n"),
                  needs_priority=True),
        JobAction("retry", _("Retry"), "can_retry", LEGAL["retry"],
                  services.retry, ngettext_lazy("Retried %(n)d job.", "Retried %(n)d jobs.", "n")),
        JobAction("cancel", _("Cancel"), "can_cancel", LEGAL["cancel"], services.cancel,
                  ngettext_lazy("Cancelled %(n)d job (a running one stops at its next check).",
                                "Cancelled %(n)d jobs (running ones stop at their next check).",
                                "n"), discards=True),
        JobAction("pause", _("Pause"), "can_pause", LEGAL["pause"],
                  services.pause, ngettext_lazy("Paused %(n)d job.", "Paused %(n)d jobs.", "n")),
        JobAction("resume", _("Resume"), "can_pause", LEGAL["resume"], services.resume,
                  ngettext_lazy("Resumed %(n)d job.", "Resumed %(n)d jobs.", "n")),
    ]
}


def perform(action, queryset, *, actor, reason="", priority=None):
    """Apply `action` to every job of `queryset` where it is legal; returns (changed, skipped)."""
    selected = queryset.count()
    # Ids first, rows in batches: no cursor stays open while the services
    # write (SQLite has no isolation between the two on one connection).
    ids = list(queryset.filter(status__in=action.legal).order_by(*action.order)
               .values_list("pk", flat=True))
    changed = 0
    for start in range(0, len(ids), 500):
        batch = Job.objects.in_bulk(ids[start:start + 500])
        for pk in ids[start:start + 500]:
            if pk not in batch:
                continue  # deleted meanwhile
            try:
                changed += action.run(batch[pk], actor=actor, reason=reason, priority=priority)
            except IllegalTransition:
                pass  # its state changed meanwhile: counted as skipped
    return changed, selected - changed


def report(request, action, changed, skipped):
    parts = [action.done % {"n": changed}]
    if skipped:
        parts.append(ngettext("Skipped %(n)d job: its state does not allow it, or it is already there.",
                              "Skipped %(n)d jobs: their state does not allow it, or they are "
                              "already there.", skipped) % {"n": skipped})
    messages.add_message(request, messages.SUCCESS if changed or not skipped else messages.WARNING,
                         " ".join(parts))


class ActionOptionsForm(forms.Form):
    reason = forms.CharField(label=_("Reason (optional, shown in each job's timeline)"),
                             required=False, max_length=500)
    priority = forms.TypedChoiceField(label=_("Priority tier"), choices=PRIORITY_TIERS, coerce=int,
                                      required=False, empty_value=None)


def safe_next(request, fallback):
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return fallback


def _admin_action(action):
    def run(modeladmin, request, queryset):
        return modeladmin.run_bulk(request, queryset, action)

    run.__name__ = action.name
    return admin.action(description=action.label, permissions=[action.permission[4:]])(run)


# --- The job list and page ---------------------------------------------------------

COUNT_CAP = 10_000
# A job's number as staff type it: ASCII digits that fit a primary key ("²".isdigit() is true).
JOB_NUMBER = re.compile(r"[0-9]{1,18}")


class CappedPaginator(Paginator):
    """Counts at most COUNT_CAP rows: a COUNT(*) over millions of finished jobs would
    make every page of the list slow. Past the cap, the last pages are not linked."""

    @cached_property
    def count(self):
        return self.object_list.order_by()[:COUNT_CAP].count()


class QueueFilter(admin.SimpleListFilter):
    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        # From settings and registered kinds: a DISTINCT over the table would scan it.
        return [(name, name) for name in selectors.queue_names()]

    def queryset(self, request, queryset):
        return queryset.filter(queue=self.value()) if self.value() else queryset


class KindFilter(admin.SimpleListFilter):
    title = _("kind")
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [(name, name) for name in registry.names()]

    def queryset(self, request, queryset):
        return queryset.filter(kind=self.value()) if self.value() else queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    # What fits a laptop beside the admin's navigation; the queue, priority and
    # times are on the job's page and in the filters (numbers run in enqueue order).
    list_display = ["id", "kind_display", "status_with_attempts", "owner", "progress_display",
                    "error_summary"]
    list_display_links = ["id", "kind_display"]
    list_filter = ["status", QueueFilter, KindFilter, admin_filters.FieldsFilter]
    list_select_related = ["owner"]
    search_fields = ["kind"]  # see get_search_results
    search_help_text = _("A job's number, its public id, its unique key, or the start of a kind.")
    ordering = ["-id"]
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count per filter choice would scan the table
    actions = [_admin_action(action) for action in ACTIONS.values()]
    fieldsets = [
        (None, {"fields": ["public_id", "kind", "queue", "status_badge", "standing_display", "priority",
                           "position", "owner_link", "linked_display", "unique_key", "fingerprint",
                           "asked_fingerprint", "concurrency_keys", "rate_key", "blocked_key",
                           "stop_requested", "on_dependency_failure"]}),
        (_("Attempts"), {"fields": ["attempts_display", "snoozes", "run_after", "worker_link",
                                    "worker_ids", "lease_expires_at"]}),
        (_("Progress"), {"fields": ["progress_bar", "progress_at"]}),
        (_("Times"), {"fields": ["enqueued_at", "started_at", "finished_at", "durations_display",
                                 "updated_at"]}),
        (_("Payload and result"), {"fields": ["payload_display", "result_display"]}),
        (_("Error"), {"fields": ["error_code", "error"]}),
    ]

    # --- permissions: jobs are never edited as a form; actions have their own ---

    def has_add_permission(self, request):
        return False  # jobs are enqueued by code, with validation

    def has_change_permission(self, request, obj=None):
        return False  # a status changes only through a service (the actions)

    def has_delete_permission(self, request, obj=None):
        # Deleting a live job would leave its concurrency slots to the safety net; prune instead.
        return super().has_delete_permission(request, obj) and (obj is None or obj.is_finished)

    def _has(self, request, codename):
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def has_retry_permission(self, request):
        return self._has(request, "can_retry")

    def has_reorder_permission(self, request):
        return self._has(request, "can_reorder")

    def has_cancel_permission(self, request):
        return self._has(request, "can_cancel")

    def has_pause_permission(self, request):
        return self._has(request, "can_pause")

    def has_manage_queues_permission(self, request):
        return self._has(request, "can_manage_queues")

    def has_manage_workers_permission(self, request):
        return self._has(request, "can_manage_workers")

    def allowed_actions(self, request, job=None):
        """The actions this user may take (on `job`, if given: only those its state allows)."""
        return [a for a in ACTIONS.values()
                if self._has(request, a.permission) and (job is None or job.status in a.legal)]

    def get_actions(self, request, action_location=ActionLocation.CHANGE_LIST):
        actions = super().get_actions(request, action_location=action_location)
        actions.pop("delete_selected", None)  # it would delete live jobs; prunejobs deletes history
        return actions

    # --- the list ---

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        if JOB_NUMBER.fullmatch(term):
            return queryset.filter(pk=int(term)), False
        try:
            return queryset.filter(public_id=uuid.UUID(term)), False
        except ValueError:
            pass
        return queryset.filter(models.Q(unique_key=term) | models.Q(kind__startswith=term)), False

    @admin.display(description=_("kind"), ordering="kind")
    def kind_display(self, job):
        return format_html('<span title="{}">{}</span>', job.kind, registry.label(job.kind))

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, job):
        note = {Outcome.CANCELLED: gettext(" (cancelling)"), Outcome.PAUSED: gettext(" (pausing)")}.get(
            job.stop_requested, "")
        return format_html('<span class="job-status job-status-{}">{}{}</span>', job.status.lower(),
                           job.get_status_display(), note)

    @admin.display(description=_("status"), ordering="status")
    def status_with_attempts(self, job):
        return format_html('{}<br><small>{}</small>', self.status_badge(job),
                           gettext("attempt %(n)d of %(max)d") % {"n": job.attempts,
                                                                  "max": job.max_attempts})

    @admin.display(description=_("attempts"))
    def attempts_display(self, job):
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description=_("progress"))
    def progress_display(self, job):
        if job.progress is None:
            return "—"
        return format_html("{}%{}", round(job.progress * 100),
                           format_html(" · {}", job.phase) if job.phase else "")

    @admin.display(description=_("progress"))
    def progress_bar(self, job):
        return render_to_string("admin/jobs/progress.html", {"p": admin_views.progress(job)})

    @admin.display(description=_("error"))
    def error_summary(self, job):
        if not job.error:
            return ""
        text = job.error if len(job.error) <= 120 else job.error[:119] + "…"
        return format_html('<span class="job-error" title="{}">{}</span>', job.error_code, text)

    # --- the job's page ---

    @admin.display(description=_("standing"))
    def standing_display(self, job):
        if job.is_finished:
            return "—"
        standing = selectors.standing(job)
        if standing.position is not None:
            return format_html("#{} · {}", standing.position, standing.message)
        return standing.message

    @admin.display(description=_("owner"))
    def owner_link(self, job):
        return admin_link(job.owner)

    @admin.display(description=_("works for"))
    def linked_display(self, job):
        return admin_link(linked_object(job))

    @admin.display(description=_("worker"))
    def worker_link(self, job):
        if job.worker is None:
            return "—"
        url = reverse("admin:jobs_job_workers")
        return format_html('<a href="{}">{}</a>', url, job.worker.name)

    @admin.display(description=_("durations"))
    def durations_display(self, job):
        return format_html_join(" · ", "{}: {}", admin_views.durations(job))

    @admin.display(description=_("payload (secrets redacted)"))
    def payload_display(self, job):
        return format_html("<pre class=\"job-json\">{}</pre>", admin_views.pretty(redact(job.payload)))

    @admin.display(description=_("result (secrets redacted)"))
    def result_display(self, job):
        if job.result is None:
            return "—"
        return format_html("<pre class=\"job-json\">{}</pre>", admin_views.pretty(redact(job.result)))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, object_id)
        extra = {}
        if job is not None:
            extra = {
                "job": job,
                "job_actions": self.allowed_actions(request, job),
                "timeline": admin_views.timeline(job),
                "workflow": [(gettext("parent"), parent) for parent in dependencies.parents_of(job)[:100]]
                + [(gettext("dependent"), dependent) for dependent in dependencies.dependents_of(job)[:100]],
                "attempt_errors": list(reversed(job.errors or [])),
                "priority_tiers": PRIORITY_TIERS,
                "up_next_url": f"{reverse('admin:jobs_job_up_next')}?{urlencode({'queue': job.queue})}",
            }
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    def changelist_view(self, request, extra_context=None):
        extra = {
            "can_retry": self.has_retry_permission(request),
            "can_cancel": self.has_cancel_permission(request),
            "search_form": admin_filters.JobSearchForm.from_request(request),
            "other_parameters": admin_filters.other_parameters(request),
        }
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    # --- actions, in bulk (changelist) and one at a time (buttons) ---

    def run_bulk(self, request, queryset, action):
        """The changelist's actions: a confirmation page first unless one job is selected."""
        form = ActionOptionsForm(request.POST if "confirm" in request.POST else None)
        many = queryset.count() > 1 or request.POST.get("select_across") == "1"
        if form.is_bound and form.is_valid():
            priority = form.cleaned_data.get("priority")
            if action.needs_priority and priority is None:
                form.add_error("priority", gettext("Choose a priority tier."))
            else:
                changed, skipped = perform(action, queryset, actor=request.user,
                                           reason=form.cleaned_data["reason"], priority=priority)
                report(request, action, changed, skipped)
                return None
        elif not many and not action.needs_priority and not action.discards:
            changed, skipped = perform(action, queryset, actor=request.user)
            report(request, action, changed, skipped)
            return None
        legal = queryset.filter(status__in=action.legal)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Are you sure?"),
            "opts": self.opts,
            "action": action,
            "form": form,
            "selected_count": queryset.count(),
            "legal_count": legal.count(),
            "sample": legal.order_by(*action.order)[:50],
            "selected_ids": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, "admin/jobs/job/action_confirmation.html", context)

    def act_view(self, request, object_id, action_name):
        """One action on one job, from a button (POST only, with CSRF, like every admin form).

        An action that discards work answers its button with a confirmation page first (a
        reason to give, the job's owner told); that page posts again with confirm=yes.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = ACTIONS.get(action_name)
        if action is None or not self._has(request, action.permission):
            raise PermissionDenied
        job = get_object_or_404(Job, pk=object_id)
        back = safe_next(request, reverse("admin:jobs_job_change", args=[job.pk]))
        if action.discards and request.POST.get("confirm") != "yes":
            return TemplateResponse(request, "admin/jobs/job/act_confirmation.html", {
                **self.admin_site.each_context(request),
                "title": gettext("Are you sure?"),
                "opts": self.opts,
                "action": action,
                "job": job,
                "kind_label": registry.label(job.kind),
                "linked": admin_link(linked_object(job)),
                "reason": request.POST.get("reason", "")[:500],
                "back": back,
            })
        form = ActionOptionsForm(request.POST)
        if not form.is_valid():
            messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
            return HttpResponseRedirect(back)
        if action.needs_priority and form.cleaned_data["priority"] is None:
            messages.error(request, gettext("Choose a priority tier from the list."))
            return HttpResponseRedirect(back)
        try:
            changed = action.run(job, actor=request.user, reason=form.cleaned_data["reason"],
                                 priority=form.cleaned_data["priority"])
        except (IllegalTransition, InvalidPriority) as exc:
            messages.warning(request, str(exc))
        else:
            report(request, action, int(changed), int(not changed))
        return HttpResponseRedirect(back)

    # What "all matching" does, per action: the states it takes jobs from, and the service.
    MATCHING = {
        "retry": (LEGAL["retry_matching"], services.retry_matching),
        "cancel": (LEGAL["cancel_matching"], services.cancel_matching),
    }

    def matching_view(self, request, action_name):
        """Retry or cancel every job matching the list's current filters and search, not only
        the page: a confirmation naming how many, then the service once per job."""
        action = ACTIONS[action_name]
        if not (self.has_view_permission(request) and self._has(request, action.permission)):
            raise PermissionDenied
        back = reverse("admin:jobs_job_changelist") + (f"?{request.GET.urlencode()}" if request.GET else "")
        try:
            changelist = self.get_changelist_instance(request)
            matching = changelist.get_queryset(request)
        except IncorrectLookupParameters:
            return HttpResponseRedirect(back)  # the list itself explains what is wrong
        statuses, service = self.MATCHING[action_name]
        form = ActionOptionsForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            # Never more than the confirmation named: jobs queued since (a higher id) are left
            # out, and if others came to match meanwhile the page asks again with the new count.
            confirmed, up_to = _whole(request.POST.get("count")), _whole(request.POST.get("up_to"))
            bounded = matching.filter(pk__lte=up_to or 0)
            if confirmed is not None and bounded.filter(status__in=statuses).count() <= confirmed:
                changed, skipped = service(bounded, actor=request.user,
                                           reason=form.cleaned_data["reason"])
                report(request, action, changed, skipped)
                return HttpResponseRedirect(back)
            messages.warning(request, gettext(
                "The matching jobs changed since the count was shown: nothing was done yet. "
                "Check the new count."))
        chosen = matching.filter(status__in=statuses)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Retry failed jobs") if action_name == "retry"
            else gettext("Cancel matching jobs"),
            "opts": self.opts,
            "action": action,
            "form": form,
            "matching_count": chosen.count(),
            "up_to": chosen.aggregate(up_to=Max("pk"))["up_to"] or 0,
            "sample": chosen.order_by("pk")[:50],
            "filters": changelist.get_filters_params(),
            "search": changelist.query,
            "back": back,
        }
        return TemplateResponse(request, "admin/jobs/job/matching_confirmation.html", context)

    def get_urls(self):
        def wrap(view):
            def wrapper(*args, **kwargs):
                return self.admin_site.admin_view(view)(*args, **kwargs)

            wrapper.model_admin = self
            return update_wrapper(wrapper, view)

        def page(view):
            return wrap(lambda request, *args, **kwargs: view(self, request, *args, **kwargs))

        # Before the default routes: those end in a catch-all "<object_id>/".
        return [
            path("up-next/", page(admin_views.up_next), name="jobs_job_up_next"),
            path("queues/", page(admin_views.queues), name="jobs_job_queues"),
            path("queues/<path:name>/<str:operation>/", page(admin_views.queue_operation),
                 name="jobs_job_queue_operation"),
            path("workers/", page(admin_views.workers), name="jobs_job_workers"),
            path("workers/<int:worker_id>/<str:command>/", page(admin_views.worker_command),
                 name="jobs_job_worker_command"),
            path("dashboard/", page(admin_views.dashboard), name="jobs_job_dashboard"),
            path("retry-failed/", wrap(lambda request: self.matching_view(request, "retry")),
                 name="jobs_job_retry_failed"),
            path("cancel-matching/", wrap(lambda request: self.matching_view(request, "cancel")),
                 name="jobs_job_cancel_matching"),
            path("<int:object_id>/do/<str:action_name>/", wrap(self.act_view), name="jobs_job_act"),
            *super().get_urls(),
        ]


# --- Workers, queues and limits -------------------------------------------------------


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    """Registered worker processes; the live view with quiet/stop is the Workers page."""

    list_display = ["name", "host", "pid", "concurrency", "started_at", "heartbeat_at",
                    "stopped_at", "command"]
    search_fields = ["name", "host"]
    ordering = ["stopped_at", "-heartbeat_at"]

    def has_add_permission(self, request):
        return False  # a worker registers itself

    def has_change_permission(self, request, obj=None):
        return False  # commands go through the Workers page, which records who sent them


class QueueForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = ["name", "paused", "concurrency", "gap_seconds"]  # bounded by the model


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    """Per-queue settings, changed for the whole fleet through `services.set_queue`."""

    form = QueueForm
    list_display = ["name", "paused", "concurrency", "gap_seconds", "rests_until"]

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) or request.user.has_perm(
            "jobs.can_manage_queues")

    def has_add_permission(self, request):
        return self.has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False  # a queue's row is its settings; pausing is the way to stop it

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        # Through the service, which also wakes the queue's workers.
        services.set_queue(obj.name, paused=obj.paused, concurrency=obj.concurrency,
                           gap_seconds=obj.gap_seconds)


@admin.register(ConcurrencyLimit)
class ConcurrencyLimitAdmin(admin.ModelAdmin):
    """How many running jobs may share a key; a change unparks waiting jobs at once."""

    list_display = ["key", "limit"]
    search_fields = ["key"]

    def has_delete_permission(self, request, obj=None):
        return False  # jobs parked behind a key whose row vanished would never be unparked

    def get_readonly_fields(self, request, obj=None):
        return ["key"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        services.set_limit(obj.key, obj.limit)


class RateLimitForm(forms.ModelForm):
    class Meta:
        model = RateLimit
        fields = ["key", "limit", "period_seconds"]  # bounded by the model


@admin.register(RateLimit)
class RateLimitAdmin(admin.ModelAdmin):
    """At most N starts per period for the jobs sharing a rate key; a change applies at once."""

    form = RateLimitForm
    list_display = ["key", "limit", "period_seconds", "opens_at"]
    search_fields = ["key"]

    def has_delete_permission(self, request, obj=None):
        return False  # jobs waiting for the key's window would wait for the safety net

    def get_readonly_fields(self, request, obj=None):
        return ["key", "opens_at"] if obj is not None else ["opens_at"]

    def save_model(self, request, obj, form, change):
        # Through the service: jobs waiting for the window take any new room at once.
        limits.set_rate(obj.key, obj.limit, obj.period_seconds)


register_progress_words = admin_views.register_progress_words

__all__ = ["ACTIONS", "PRIORITY_MAX", "PRIORITY_MIN", "linked_object", "redact", "register_job_link",
           "register_progress_words"]


def _whole(text):
    """A non-negative whole number from a form's hidden field, or None."""
    text = str(text or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None
