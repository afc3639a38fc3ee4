"""The claim order: which READY job of a queue workers take first.

The order is `CLAIM_ORDER` (jobs/models.py, beside the index that serves it):
priority, then staff's manual position, then age, then id. Everything here
derives from it, so the claim, "3 ahead of you" on a page, Up next in the
admin and a move to the front can never disagree:

- `key(job)` sorts jobs in memory as the claim would;
- `ahead(job)` / `behind(job)` filter the jobs that claim order puts before
  or after one, comparing its fields in the same order;
- `ready_in_order(...)` reads READY jobs in that order from the two partial
  indexes (claimable and parked) and merges them.

Definitions and reads only: staff's moves in this order are people's verbs
(jobs/engine/actions.py), and the SQL statements read `SQL` from here.
"""

import heapq

from django.db.models import Q
from django.utils.translation import gettext as _

from jobs.exceptions import InvalidPriority
from jobs.models import (
    CLAIM_ORDER,
    CLAIMABLE,
    PARKED,
    PRIORITY_MAX,
    PRIORITY_MIN,
    Job,
    JobStatus,
)

# The order's fields without their direction, and each one's direction.
FIELDS = tuple(term.lstrip("-") for term in CLAIM_ORDER)
DESCENDING = tuple(term.startswith("-") for term in CLAIM_ORDER)
REVERSED = tuple(field if desc else f"-{field}" for field, desc in zip(FIELDS, DESCENDING, strict=True))
# The same order in SQL, for the statements of jobs/engine/queries.py.
SQL = ", ".join(f"{field} DESC" if desc else field for field, desc in zip(FIELDS, DESCENDING, strict=True))
LOOKUP = {"pk": "pk", "id": "pk"}

def key(job):
    """A sort key: sorted(jobs, key=order.key) is claim order."""
    return tuple(-getattr(job, f) if desc else getattr(job, f) for f, desc in zip(FIELDS, DESCENDING,
                                                                                   strict=True))


def _compare(job, *, before):
    """Jobs that claim order puts before (or after) `job`: the first field that differs decides."""
    terms, equal = [], {}
    for field, desc in zip(FIELDS, DESCENDING, strict=True):
        # "Before" on a descending field means a larger value.
        operator = "gt" if desc == before else "lt"
        name = LOOKUP.get(field, field)
        terms.append(Q(**equal, **{f"{name}__{operator}": getattr(job, field)}))
        equal[name] = getattr(job, field)
    condition = terms[0]
    for term in terms[1:]:
        condition |= term
    return condition


def ahead(job):
    """A filter for the jobs claim order puts before `job`."""
    return _compare(job, before=True)


def behind(job):
    """A filter for the jobs claim order puts after `job`."""
    return _compare(job, before=False)


def ready_in_order(queue, condition=None, *, reverse=False, offset=0, limit=1, related=()):
    """READY jobs of `queue` matching `condition`, in claim order (or its reverse), from `offset`.

    The claimable and the parked jobs are read separately, each half walking
    its own partial index in order, then merged by `key`: one query over all
    READY rows would have no index to walk and would sort the queue each time.
    """
    halves = []
    for half in (CLAIMABLE, PARKED):
        rows = Job.objects.filter(half, queue=queue)
        if condition is not None:
            rows = rows.filter(condition)
        if related:
            rows = rows.select_related(*related)
        halves.append(rows.order_by(*(REVERSED if reverse else CLAIM_ORDER))[: offset + limit])
    merged = heapq.merge(*halves, key=key, reverse=reverse)
    return [job for i, job in enumerate(merged) if i >= offset][:limit]


def position(job):
    """1 for the next READY job of its queue to be claimed, 2 for the one after, ..."""
    return Job.objects.filter(ahead(job), status=JobStatus.READY, queue=job.queue).count() + 1


def check_priority(priority):
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
        PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise InvalidPriority(
            _("Priority must be a whole number from %(min)d to %(max)d, not %(value)r.")
            % {"min": PRIORITY_MIN, "max": PRIORITY_MAX, "value": priority}
        )
