"""django-q2's Schedules list, made readable: repeats in words and the columns staff act on.

Registered in place of django-q2's own admin (jobs.admin imports this module).
"""

from django.contrib import admin
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _
from django_q.admin import ScheduleAdmin as DjangoQScheduleAdmin
from django_q.models import Schedule

from jobs.admin_lists import FitsALaptop


def repeats_words(repeats):
    """django-q2 counts repeats down; a negative count never reaches zero."""
    if repeats < 0:
        return _("forever")
    if repeats == 0:
        return _("no more (disabled)")
    return repeats


admin.site.unregister(Schedule)


@admin.register(Schedule)
class ScheduleAdmin(FitsALaptop, DjangoQScheduleAdmin):
    # A site has a handful of schedules on one cluster: without the cluster column and the
    # filters (which take a third of the width) the list fits a laptop's screen beside the
    # admin's navigation.
    list_display = ("name", "func_display", "schedule_type", "repeats_display", "next_run",
                    "get_last_run", "get_success")
    list_filter = ()
    list_display_links = ("name",)

    @admin.display(description=_("repeats"), ordering="repeats")
    def repeats_display(self, schedule):
        return repeats_words(schedule.repeats)

    @admin.display(description=_("function"), ordering="func")
    def func_display(self, schedule):
        # A dotted path has no space to wrap at: it may break after each dot instead.
        return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in schedule.func.split(".")))
