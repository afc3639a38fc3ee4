"""People's verbs on jobs, workers and queues, and the one table of where each is legal.

Users, staff (the admin), the JSON API and the `jobs` command all call these;
each is a guarded change in one transaction, noted with its actor and reason.
`LEGAL` says from which states each verb may act: the services guard their
UPDATEs with it, the admin offers an action only on jobs it allows, and the
`jobs` command's dry run counts with it.
"""

import logging

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Now
from django.utils.translation import gettext as _

from jobs.engine import dependencies, history, limits, order, transitions, wakeup
from jobs.exceptions import IllegalTransition
from jobs.models import LIVE_STATUSES, Action, Job, JobStatus, Outcome, Worker

log = logging.getLogger("jobs.services")  # its name before the move: logging configs name it

READY, RUNNING, PAUSED = JobStatus.READY, JobStatus.RUNNING, JobStatus.PAUSED
FAILED, CANCELLED = JobStatus.FAILED, JobStatus.CANCELLED

# Where each verb may act. A RUNNING job is asked to stop (cancel, pause) and its
# worker records the end; the other states change at once.
LEGAL = {
    "move_to_front": (READY,),
    "move_up": (READY,),
    "move_down": (READY,),
    "set_priority_tier": LIVE_STATUSES,
    "cancel": (READY, RUNNING, PAUSED),
    "cancel_matching": (READY, RUNNING, PAUSED),
    "pause": (READY, RUNNING),
    "resume": (PAUSED,),
    # One job or a selection: a person pointing at a job asks for it again, cancelled or not.
    "retry": (FAILED, CANCELLED),
    # Every job a filter matches: only the failed ones; a cancelled job was stopped on
    # purpose, and a broad filter would bring back whole batches of them.
    "retry_matching": (FAILED,),
}

# Staff's moves: positions are whole numbers and ties fall back to age, so
# putting a job right before another may need the jobs ahead of that one (at
# its priority) to step forward one position each; a move renumbers at most
# this many, which bounds its cost by how far forward it reaches.
MOVE_RENUMBER_MAX = 1000


def cancel(job, *, actor=None, reason=""):
    """READY/PAUSED → CANCELLED at once; RUNNING → asks its worker to stop (it then records CANCELLED)."""
    with transaction.atomic():
        if not transitions.leave_ready(job, JobStatus.CANCELLED, Outcome.CANCELLED,
                                       reason=reason, code="cancelled", actor=actor):
            if not Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
                stop_requested=Outcome.CANCELLED
            ):
                raise IllegalTransition(_("Only a queued, running or paused job can be cancelled."))
            history.note(job, Action.CANCEL_REQUESTED, actor=actor, reason=reason)
    wakeup.notify_stop(job.pk)


def pause(job, *, actor=None, reason=""):
    """READY → PAUSED at once; RUNNING → asks its worker to stop (it then records PAUSED)."""
    with transaction.atomic():
        if Job.objects.filter(pk=job.pk, status=JobStatus.READY).update(
            status=JobStatus.PAUSED, blocked_key=None
        ):
            history.note(job, Outcome.PAUSED, status=JobStatus.PAUSED, actor=actor, reason=reason)
        elif Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
            stop_requested=Outcome.PAUSED
        ):
            history.note(job, Action.PAUSE_REQUESTED, actor=actor, reason=reason)
        else:
            raise IllegalTransition(_("Only a queued or running job can be paused."))
    wakeup.notify_stop(job.pk)


def resume(job, *, actor=None, reason=""):
    """PAUSED → READY, keeping its attempts."""
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, status__in=LEGAL["resume"]).update(
            status=JobStatus.READY, run_after=Now(), error_code="", error=""
        ):
            raise IllegalTransition(_("Only a paused job can be resumed."))
        dependencies.hold_if_waiting(job)
        history.note(job, Action.RESUMED, status=JobStatus.READY, actor=actor, reason=reason)
    wakeup.notify(job.queue)


def retry(job, *, actor=None, reason=""):
    """FAILED/CANCELLED → READY with attempts reset (a person asked for another go)."""
    try:
        with transaction.atomic():
            if not Job.objects.filter(pk=job.pk, status__in=LEGAL["retry"]).update(
                run_after=Now(), **transitions.FRESH_START
            ):
                raise IllegalTransition(_("Only a failed or cancelled job can be retried."))
            job.attempts = 0
            dependencies.hold_if_waiting(job)
            history.note(job, Action.RETRIED, status=JobStatus.READY, actor=actor, reason=reason)
            wakeup.notify(job.queue)
    except IntegrityError:
        raise IllegalTransition(_("Another job for the same thing is already queued or running.")) from None


def retry_matching(queryset, *, actor=None, reason="", batch_size=500):
    """Retry every FAILED job of `queryset`, one `retry()` each; returns (retried, skipped).

    Not the CANCELLED ones, which `retry()` takes one by one: a filter over many
    jobs would bring back work people stopped on purpose (see LEGAL).
    """
    return _each_matching(queryset, LEGAL["retry_matching"], retry, actor=actor, reason=reason,
                          batch_size=batch_size)


def cancel_matching(queryset, *, actor=None, reason="", batch_size=500):
    """Cancel every live job of `queryset`, one `cancel()` each; returns (cancelled, skipped).

    Running jobs are asked to stop, as `cancel()` does for one.
    """
    return _each_matching(queryset, LEGAL["cancel_matching"], cancel,
                          actor=actor, reason=reason, batch_size=batch_size)


def _each_matching(queryset, statuses, service, *, actor, reason, batch_size):
    """`service(job)` for every job of `queryset` in `statuses`; (done, skipped).

    Walks the ids in primary-key batches, so a filter that matches millions of
    jobs never loads them at once or holds one long transaction; a job whose
    state changed meanwhile is skipped.
    """
    done = skipped = 0
    matching = queryset.filter(status__in=statuses).select_related(None).order_by("pk")
    last = 0
    while batch := list(matching.filter(pk__gt=last)[:batch_size]):
        for job in batch:
            try:
                service(job, actor=actor, reason=reason)
                done += 1
            except IllegalTransition:
                skipped += 1
        last = batch[-1].pk
    return done, skipped


def command_worker(worker, command, *, actor=None):
    """Tell a live worker to stop claiming ("quiet") or to shut down gracefully ("stop").

    The worker reads its command at its next heartbeat (JOBS_HEARTBEAT_SECONDS).
    """
    if command not in (Worker.Command.QUIET, Worker.Command.STOP):
        raise ValueError(_("A worker can be told to quiet or to stop, nothing else."))
    if not Worker.objects.filter(pk=worker.pk, stopped_at__isnull=True).update(command=command):
        raise IllegalTransition(_("That worker has already stopped."))
    log.info("worker %s told to %s by %s", worker.name, command, actor or "nobody")


def set_queue(name, **changes):
    """Change a queue's live settings (paused, concurrency, gap_seconds) for the whole fleet."""
    limits.set_queue(name, **changes)
    wakeup.notify(name)


# --- Staff's moves in the claim order --------------------------------------------------------------------


def _neighbour(job, *, before):
    rows = order.ready_in_order(job.queue, (order.ahead if before else order.behind)(job) & ~Q(pk=job.pk), reverse=before)
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
    before_target = order.ready_in_order(
        target.queue, Q(priority=target.priority) & order.ahead(target) & ~Q(pk=job.pk),
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
                target = (order.ready_in_order(current.queue, ~Q(pk=current.pk)) or [None])[0]
                if target is not None and order.key(target) > order.key(current):
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


def set_priority_tier(job, priority, *, actor=None, reason=""):
    """A live job joins priority `priority` in age order: its manual position is cleared."""
    order.check_priority(priority)
    with transaction.atomic():
        was = Job.objects.filter(pk=job.pk).values_list("priority", flat=True).first()
        if not Job.objects.filter(pk=job.pk, status__in=LIVE_STATUSES).update(
            priority=priority, position=0
        ):
            raise IllegalTransition(_("Only a live job's priority can change."))
        history.note(job, Action.PRIORITY, actor=actor, reason=reason, priority=priority,
                     was=was)
