"""What schedules may call ("downloads.scheduled.housekeeping"; see jobs/schedules.py).

Each function only queues a Haulage job and returns at once: the work itself
runs on the engine, with its leases, retries and admin. The kinds' unique
keys make firings from several machines, or a slow run still going when the
next firing comes, add nothing.
"""

from django.utils.translation import gettext_lazy as _

import jobs
from downloads.handlers import HOUSEKEEP_KIND
from jobs import schedules


@schedules.schedulable(_("Storage housekeeping"))
def housekeeping():
    """Queue a storage housekeeping run (downloads.housekeep) unless one is queued or running;
    returns the job's public id."""
    return str(jobs.enqueue(HOUSEKEEP_KIND, {}).public_id)
