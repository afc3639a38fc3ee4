"""django-q2's admin, made safe and readable: schedules call registered functions only, repeats
read in words, and resubmitting a finished task takes the change permission of its list.

Registered in place of django-q2's own admins (jobs.admin imports this module).
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django_q.admin import FailAdmin, TaskAdmin
from django_q.admin import ScheduleAdmin as DjangoQScheduleAdmin
from django_q.models import Failure, Schedule, Success
from django_q.tasks import async_task

from jobs import schedules
from jobs.admin.lists import FitsALaptop

# What a schedule calls, beyond the function itself: free text that reaches the call, so only
# superusers write it (and what they write must suit the function).
CALL_FIELDS = ("args", "kwargs", "hook", "intended_date_kwarg")


def repeats_words(repeats):
    """django-q2 counts repeats down; a negative count never reaches zero."""
    if repeats < 0:
        return _("forever")
    if repeats == 0:
        return _("no more (disabled)")
    return repeats


def _optional(choices):
    return lambda: [("", "---------"), *choices()]


class ScheduleForm(forms.ModelForm):
    # Chosen from the registered functions (jobs/schedules.py), never typed as an import path;
    # a row naming another shows no choice, so saving it asks for one.
    func = forms.ChoiceField(label=_("function"), choices=_optional(schedules.choices))
    hook = forms.ChoiceField(label=_("hook"), choices=_optional(schedules.choices), required=False)

    class Meta:
        model = Schedule
        fields = ["name", "func", *CALL_FIELDS, "schedule_type", "minutes", "repeats", "next_run",
                  "cron", "cluster"]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("func"):
            # Fields a user may not edit are not in the form: the row's values are what fire.
            call = {name: cleaned.get(name, getattr(self.instance, name)) for name in CALL_FIELDS}
            try:
                schedules.check_call(cleaned["func"], call["args"], call["kwargs"],
                                     call["intended_date_kwarg"], call["hook"])
            except ValueError as exc:
                raise ValidationError(str(exc)) from None
        return cleaned


admin.site.unregister(Schedule)


@admin.register(Schedule)
class ScheduleAdmin(FitsALaptop, DjangoQScheduleAdmin):
    form = ScheduleForm
    # A site has a handful of schedules on one cluster: without the cluster column and the
    # filters (which take a third of the width) the list fits a laptop's screen beside the
    # admin's navigation.
    list_display = ("name", "func_display", "schedule_type", "repeats_display", "next_run",
                    "get_last_run", "get_success")
    list_filter = ()
    list_display_links = ("name",)

    def get_readonly_fields(self, request, obj=None):
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if request.user.is_superuser else readonly + CALL_FIELDS

    @admin.display(description=_("repeats"), ordering="repeats")
    def repeats_display(self, schedule):
        return repeats_words(schedule.repeats)

    @admin.display(description=_("function"), ordering="func")
    def func_display(self, schedule):
        # A dotted path has no space to wrap at: it may break after each dot instead.
        path = format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in schedule.func.split(".")))
        if schedules.get(schedule.func) is None:
            return format_html("{} <strong>({})</strong>", path, _("not registered: never runs"))
        return path


@admin.action(description=_("Resubmit the selected tasks"), permissions=["change"])
def resubmit(modeladmin, request, queryset):
    """Run the selected tasks' functions again; one no longer registered would only be refused."""
    sent = 0
    for task in queryset:
        if schedules.get(task.func) is None:
            continue
        async_task(task.func, *task.args or (), hook=task.hook, group=task.group,
                   cluster=task.cluster, **task.kwargs or {})
        sent += 1
    modeladmin.message_user(request, ngettext("Resubmitted %(n)d task.", "Resubmitted %(n)d tasks.",
                                              sent) % {"n": sent}, messages.SUCCESS)
    if sent < len(queryset):
        modeladmin.message_user(request, _("%(n)d not resubmitted: their function is not "
                                           "registered.") % {"n": len(queryset) - sent},
                                messages.WARNING)


admin.site.unregister(Success)
admin.site.unregister(Failure)


@admin.register(Success)
class SuccessAdmin(TaskAdmin):
    actions = [resubmit]


@admin.register(Failure)
class FailureAdmin(FailAdmin):
    actions = [resubmit]  # which keeps the failure: the new run records its own outcome
