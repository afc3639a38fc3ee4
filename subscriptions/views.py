"""The subscriptions page: the list with its add form, one row's live partial, the actions and
one subscription's entries.

A row polls its own partial while a check is queued or running; the partial
for an idle subscription comes back without the polling trigger. Every view
looks subscriptions up through the owner, so another user's id is a 404.
"""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from jobs.exceptions import IllegalTransition
from subscriptions import selectors, services
from subscriptions.forms import SubscriptionForm

ENTRIES_LIMIT = 500
# Where a refusal of services.subscribe() is shown; the address's own problems go under it.
FIELD_OF_ERROR = {"format": "format", "interval": "interval_s", "interval_short": "interval_s",
                  "interval_long": "interval_s", "too_many": None}


def _mine(request, subscription_id):
    found = selectors.subscription_of(request.user, subscription_id)
    if found is None:
        raise Http404
    return found


@require_http_methods(["GET", "POST"])
def subscription_list(request):
    form = SubscriptionForm(request.POST or None)
    status = 200
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            services.subscribe(request.user, data["url"], fmt=data["format"],
                               interval_s=data["interval_s"])
        except ValidationError as exc:
            form.add_error(FIELD_OF_ERROR.get(exc.code, "url"), exc)
            status = 400
        else:
            messages.success(request, _("Subscribed. The first check is on its way."))
            return redirect("subscriptions:list")
    elif request.method == "POST":
        status = 400
    states = [selectors.subscription_state(s) for s in selectors.subscriptions_of(request.user)]
    return render(request, "subscriptions/list.html", {"form": form, "states": states},
                  status=status)


@require_GET
def subscription_row(request, subscription_id):
    state = selectors.subscription_state(_mine(request, subscription_id))
    return render(request, "subscriptions/_row.html", {"state": state})


@require_GET
def subscription_detail(request, subscription_id):
    sub = _mine(request, subscription_id)
    return render(request, "subscriptions/detail.html", {
        "state": selectors.subscription_state(sub),
        "entries": selectors.entry_rows(sub, limit=ENTRIES_LIMIT),
    })


ACTIONS = {
    "pause": services.pause,
    "resume": services.resume,
    "check": services.check_now,
}
DONE = {
    "pause": gettext_lazy("The subscription is paused."),
    "resume": gettext_lazy("The subscription is active again."),
    "check": gettext_lazy("A check is on its way."),
}


@require_POST
def subscription_action(request, subscription_id, name):
    sub = _mine(request, subscription_id)
    notice = ""
    try:
        ACTIONS[name](sub)
    except IllegalTransition as exc:
        notice = str(exc)
    if not request.htmx:
        if notice:
            messages.error(request, notice)
        else:
            messages.success(request, DONE[name])
        return redirect("subscriptions:list")
    state = selectors.subscription_state(_mine(request, subscription_id))
    return render(request, "subscriptions/_row.html", {"state": state, "notice": notice})


@require_POST
def subscription_delete(request, subscription_id):
    services.remove(_mine(request, subscription_id))
    if request.htmx:
        return HttpResponse("")  # the row swaps itself out
    messages.success(request, _("The subscription was removed; its downloads stay."))
    return redirect("subscriptions:list")
