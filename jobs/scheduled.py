"""The engine's scheduled functions, fired by django-q2 schedules (see jobs/runtime/scheduler.py).

Each one only enqueues a Haulage job, so the work itself has the engine's
guarantees (leases, retries, history) and a firing takes milliseconds.
"""

from django.utils.translation import gettext_lazy as _

from jobs import schedules, services


@schedules.schedulable(_("Prune job history"))
def prune_history():
    """Queue the prune of old history; a prune still queued or running absorbs the firing."""
    return str(services.enqueue("jobs.prune").pk)
