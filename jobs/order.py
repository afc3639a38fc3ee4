"""The claim order: which READY job of a queue workers take first, and staff's moves in it.

The order is `CLAIM_ORDER` (jobs/models.py, beside the index that serves it):
priority, then staff's manual position, then age, then id. Everything here
derives from it, so the claim, "3 ahead of you" on a page, Up next in the
admin and a move to the front can never disagree:

- `key(job)` sorts jobs in memory as the claim would;
- `ahead(job)` / `behind(job)` filter the jobs that claim order puts before
  or after one, comparing its fields in the same order;
- `ready_in_order(...)` reads READY jobs in that order from the two partial
  indexes (claimable and parked) and merges them.
"""

import heapq

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils.translation import gettext as _

from jobs import history
from jobs.exceptions import IllegalTransition, InvalidPriority
from jobs.models import (
    CLAIM_ORDER,
    LIVE_STATUSES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    Action,
    Job,
    JobStatus,
)

# The order's fields without their direction, and each one's direction.
FIELDS = tuple(term.lstrip("-") for term in CLAIM_ORDER)
DESCENDING = tuple(term.startswith("-") for term in CLAIM_ORDER)
REVERSED = tuple(field if desc else f"-{field}" for field, desc in zip(FIELDS, DESCENDING, strict=True))
# The same order in SQL, for the statements of jobs/queries.py.
SQL = ", ".join(f"{field} DESC" if desc else field for field, desc in zip(FIELDS, DESCENDING, strict=True))
LOOKUP = {"pk": "pk", "id": "pk"}

# Staff's moves: positions are whole numbers and ties fall back to age, so
# putting a job right before another may need the jobs ahead of that one (at
# its priority) to step forward one position each; a move renumbers at most
# this many, which bounds its cost by how far forward it reaches.
MOVE_RENUMBER_MAX = 1000


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
    for parked in (False, True):
        rows = Job.objects.filter(queue=queue, status=JobStatus.READY, blocked_key__isnull=not parked)
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


# --- Staff's moves --------------------------------------------------------------------


def _neighbour(job, *, before):
    rows = ready_in_order(job.queue, (ahead if before else behind)(job) & ~Q(pk=job.pk), reverse=before)
    return rows[0] if rows else None


def _place_before(job, target):
    """New positions that put `job` right before `target` in claim order, at target's priority.

    The job takes `position - 1` of the target; the jobs of that priority
    ahead of the target step forward only while they would otherwise sort
    behind the job, nearest first, so their order among themselves holds and
    nothing behind the target is touched. Returns {job id: new position}.
    """
    moves = {job.pk: target.position - 1}
    bound = (target.position - 1, job.enqueued_at, job.pk)
    before_target = ready_in_order(
        target.queue, Q(priority=target.priority) & ahead(target) & ~Q(pk=job.pk),
        reverse=True, limit=MOVE_RENUMBER_MAX + 1,
    )
    for other in before_target:
        if (other.position, other.enqueued_at, other.pk) < bound:
            return moves
        if len(moves) > MOVE_RENUMBER_MAX:
            break
        moves[other.pk] = bound[0] - 1
        bound = (bound[0] - 1, other.enqueued_at, other.pk)
    else:
        return moves
    raise IllegalTransition(
        _("This job is too far back to move one place at a time; move it to the front "
          "or change its priority instead.")
    )


def _move(job, how, *, actor, reason):
    """Reorder a READY job (`how`: front, up, down); False when it already stands there."""
    with transaction.atomic():
        # The guard and the neighbours are read in one transaction; a job
        # claimed meanwhile fails the guarded UPDATEs below and is left alone.
        current = Job.objects.filter(pk=job.pk, status=JobStatus.READY).first()
        if current is None:
            raise IllegalTransition(_("Only a queued job can be moved."))
        if how == "down":
            after = _neighbour(current, before=False)
            if after is None:
                return False
            beyond = _neighbour(after, before=False)
            if beyond is not None and beyond.priority == after.priority:
                priority, moves = after.priority, _place_before(current, beyond)
            else:  # `after` is the last of its priority: the job goes right behind it
                priority, moves = after.priority, {current.pk: after.position + 1}
        else:
            if how == "front":
                target = (ready_in_order(current.queue, ~Q(pk=current.pk)) or [None])[0]
                if target is not None and key(target) > key(current):
                    target = None  # already first
            else:
                target = _neighbour(current, before=True)
            if target is None:
                return False
            priority, moves = target.priority, _place_before(current, target)
        new_position = moves.pop(current.pk)
        if not Job.objects.filter(pk=current.pk, status=JobStatus.READY).update(
            priority=priority, position=new_position
        ):
            raise IllegalTransition(_("Only a queued job can be moved."))
        if moves:
            Job.objects.filter(pk__in=list(moves), status=JobStatus.READY).update(
                position=Case(*(When(pk=pk, then=Value(p)) for pk, p in moves.items()),
                              default=F("position"), output_field=Job._meta.get_field("position"))
            )
        history.note(current, Action.MOVED, actor=actor, reason=reason, how=how,
                     priority=priority, position=new_position,
                     was=[current.priority, current.position], renumbered=len(moves))
    return True


def move_to_front(job, *, actor=None, reason=""):
    """READY: first in its queue's claim order (the top priority, a position before all of it)."""
    return _move(job, "front", actor=actor, reason=reason)


def move_up(job, *, actor=None, reason=""):
    """READY: swap places with the job workers would take just before it (taking its priority)."""
    return _move(job, "up", actor=actor, reason=reason)


def move_down(job, *, actor=None, reason=""):
    """READY: swap places with the job workers would take just after it (taking its priority)."""
    return _move(job, "down", actor=actor, reason=reason)


def check_priority(priority):
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
        PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise InvalidPriority(
            _("Priority must be a whole number from %(min)d to %(max)d, not %(value)r.")
            % {"min": PRIORITY_MIN, "max": PRIORITY_MAX, "value": priority}
        )


def set_priority_tier(job, priority, *, actor=None, reason=""):
    """A live job joins priority `priority` in age order: its manual position is cleared."""
    check_priority(priority)
    with transaction.atomic():
        was = Job.objects.filter(pk=job.pk).values_list("priority", flat=True).first()
        if not Job.objects.filter(pk=job.pk, status__in=LIVE_STATUSES).update(
            priority=priority, position=0
        ):
            raise IllegalTransition(_("Only a live job's priority can change."))
        history.note(job, Action.PRIORITY, actor=actor, reason=reason, priority=priority,
                     was=was)
