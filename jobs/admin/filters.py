"""The job list's text filters: owner, error code, dates, unique key, a payload field.

They sit in a form above the list (`JobSearchForm`) and reach the list's
queryset through one admin list filter (`FieldsFilter`) that reads them with
jobs/selectors/filters.py, the parser `manage.py jobs` uses too. A value it cannot read
is said at the top of the page and the list shows nothing: an unread filter
must not widen "all matching" to every job.
"""

from django import forms
from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from jobs.selectors.filters import FilterError, JobFilter

# Query parameter -> JobFilter.parse() argument.
PARAMETERS = {"owner": "owner", "error_code": "error_code", "since": "since", "until": "until",
              "unique_key": "unique_key", "payload": "payload"}


class FieldsFilter(admin.ListFilter):
    """Applies the text filters; shows nothing in the sidebar (the form above the list holds them).

    It says it has output, since the admin applies only filters that do; its template is empty.
    """

    title = _("fields")
    template = "admin/jobs/job/no_filter.html"

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        for name in PARAMETERS:
            if name in params:
                self.used_parameters[name] = params.pop(name)[-1]

    def has_output(self):
        return True

    def choices(self, changelist):
        return []

    def expected_parameters(self):
        return list(PARAMETERS)

    def queryset(self, request, queryset):
        try:
            job_filter = JobFilter.parse(**{PARAMETERS[k]: v for k, v in self.used_parameters.items()})
        except FilterError as exc:
            said = getattr(request, "_job_filter_errors", set())
            if str(exc) not in said:  # the list and its count both ask
                messages.error(request, str(exc))
                said.add(str(exc))
                request._job_filter_errors = said
            return queryset.none()
        return job_filter.apply(queryset)


class JobSearchForm(forms.Form):
    """What the filter form above the job list shows (the values come back as typed)."""

    owner = forms.CharField(label=_("Owner"), required=False, max_length=255,
                            widget=forms.TextInput(attrs={"placeholder": _("user name")}))
    error_code = forms.CharField(label=_("Error code"), required=False, max_length=255)
    since = forms.CharField(label=_("Queued from"), required=False,
                            widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.CharField(label=_("Queued until"), required=False,
                            widget=forms.DateInput(attrs={"type": "date"}))
    unique_key = forms.CharField(label=_("Unique key"), required=False, max_length=255)
    payload = forms.CharField(label=_("Payload field"), required=False, max_length=1000,
                              widget=forms.TextInput(attrs={"placeholder": "key=value"}))

    @classmethod
    def from_request(cls, request):
        return cls({name: request.GET.get(name, "")[:1000] for name in PARAMETERS})


def other_parameters(request):
    """The list's other parameters (state, queue, kind, search, order), kept by the form."""
    return [(name, value) for name, values in request.GET.lists()
            if name not in PARAMETERS and name != "p" for value in values]
