"""Workflows: a job that depends on others starts only once every one of them is SUCCESSFUL.

A *dependent* is enqueued with `depends_on=[parents]` and exists from
the start, parked as "@parents" out of the claim index. Its fate is decided
in the transaction of its last parent's final transition, never by a signal
in the finishing process, so a worker killed right after that commit loses
nothing:

- every parent SUCCESSFUL → the dependent goes into the claim index;
- a parent FAILED or CANCELLED → the dependent is CANCELLED with error code
  "dependency_failed" (and its own dependents after it), or, with
  `on_dependency_failure="run"`, goes into the claim index all the same.

Linking locks the parents' rows (FOR NO KEY UPDATE): a parent finishing at
that moment waits for the link to commit, then sees it. Each parent's final
transition locks its dependents after its own row, so of two parents ending
together the second sees the first's committed state. `has_dependents`
keeps the finishing of jobs without any to a flag read in the same statement.
The reaper decides, as a safety net, dependents whose parents have all ended
(`decide_stranded`).

A kind may declare that it *follows* others (`follows=("downloads.segment",)`
in its policy): every new job of those kinds gets one of it as a dependent,
enqueued in the same transaction, with the parent's payload under "of".
"""

import uuid

from django.db import transaction
from django.utils.translation import gettext as _

from jobs.engine import limits, queries, registry, wakeup
from jobs.models import (
    LIVE_STATUSES,
    Job,
    JobDependency,
    JobStatus,
    OnDependencyFailure,
)

FAILED_PARENT = "dependency_failed"
BATCH = 500  # stranded dependents decided per reaper round


def parent_ids(depends_on):
    """The job ids named by `depends_on`: Jobs, TaskResults, ids or public ids (strings).

    Raises ValueError for one that names no job: a dependent of nothing would
    wait for ever.
    """
    ids, public = set(), set()
    for item in depends_on:
        value = getattr(item, "pk", None) or getattr(item, "id", item)
        if isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
            continue
        try:
            public.add(uuid.UUID(str(value)))
        except ValueError:
            raise ValueError(_("depends_on takes jobs, task results or their ids, not %(v)r.")
                             % {"v": item}) from None
    if public:
        found = dict(Job.objects.filter(public_id__in=public).values_list("public_id", "pk"))
        missing = public - set(found)
        if missing:
            raise ValueError(_("No job has the id %(id)s.") % {"id": sorted(map(str, missing))[0]})
        ids.update(found.values())
    known = set(Job.objects.filter(pk__in=ids).values_list("pk", flat=True))
    if ids - known:
        raise ValueError(_("No job has the id %(id)s.") % {"id": min(ids - known)})
    return sorted(ids)


ON_FAILURE = frozenset(OnDependencyFailure.values)  # built once: every enqueue checks it


def check_on_failure(value):
    if not isinstance(value, str) or value not in ON_FAILURE:  # a list in a set raises TypeError
        raise ValueError(_("on_dependency_failure is “cancel” or “run”, not %(v)r.") % {"v": value})
    return value


def lock_parents(ids):
    """Inside the enqueue's transaction: lock the parents and return their states.

    FOR NO KEY UPDATE conflicts with the guarded UPDATE of a final transition,
    so a parent cannot finish unseen between this read and the link's commit.
    """
    rows = Job.objects.filter(pk__in=ids).order_by("pk")
    if queries.is_postgres():
        rows = rows.select_for_update(no_key=True)
    return dict(rows.values_list("pk", "status"))


def park_if_waiting(job, states):
    """Before the dependent's insert: park it while a parent is live; say whether it may ever run."""
    if any(status in LIVE_STATUSES for status in states.values()):
        job.blocked_key = limits.PARENTS
        return True
    return all(status == JobStatus.SUCCESSFUL for status in states.values()) or \
        job.on_dependency_failure == OnDependencyFailure.RUN


def link(dependent, parent_ids_):
    """Record the dependent's parents (after its insert, in the same transaction)."""
    JobDependency.objects.bulk_create(
        [JobDependency(parent_id=pk, child_id=dependent.pk) for pk in parent_ids_],
        ignore_conflicts=True)
    Job.objects.filter(pk__in=parent_ids_, has_dependents=False).update(has_dependents=True)


def parents_ended(parent_ids_):
    """In the transaction of these parents' final transitions: decide their waiting dependents.

    Those free to run are released here; returns those to cancel (a parent
    failed), which the caller's transitions cancel.
    """
    linked = JobDependency.objects.filter(parent__in=parent_ids_).values("child")
    # Locked in id order, after the parent's own row: of two parents ending at
    # once, the second to lock a dependent sees the first's committed state.
    dependents = list(Job.objects.filter(pk__in=linked, status=JobStatus.READY,
                                       blocked_key=limits.PARENTS)
                    .order_by("pk").select_for_update())
    return [dependent for dependent in dependents if _decide(dependent)]


def _decide(dependent):
    """Release `dependent` if its parents allow it; True when it must be cancelled instead."""
    states = list(JobDependency.objects.filter(child=dependent).values_list("parent__status", flat=True))
    if any(status in LIVE_STATUSES for status in states):
        return False
    if all(status == JobStatus.SUCCESSFUL for status in states) or \
            dependent.on_dependency_failure == OnDependencyFailure.RUN:
        if Job.objects.filter(pk=dependent.pk, status=JobStatus.READY,
                              blocked_key=limits.PARENTS).update(blocked_key=None):
            wakeup.notify(dependent.queue)
        return False
    return True


def hold_if_waiting(job):
    """A job made READY again (resumed, retried by hand): back out of the claim index while a
    parent is still live. Parents that ended, however, do not stop a person's explicit go."""
    if JobDependency.objects.filter(child_id=job.pk, parent__status__in=LIVE_STATUSES).exists():
        Job.objects.filter(pk=job.pk, status=JobStatus.READY).update(blocked_key=limits.PARENTS)


def decide_stranded(cancel, limit=BATCH):
    """Safety net: decide waiting dependents whose parents have all ended; returns how many.

    `cancel(job)` cancels one whose parent failed, in the transaction that locked it.
    """
    waiting = (Job.objects.filter(status=JobStatus.READY, blocked_key=limits.PARENTS)
               .exclude(parent_links__parent__status__in=LIVE_STATUSES)
               .values_list("pk", flat=True)[:limit])
    decided = 0
    for pk in list(waiting):
        with transaction.atomic():
            dependent = Job.objects.select_for_update().filter(
                pk=pk, status=JobStatus.READY, blocked_key=limits.PARENTS).first()
            if dependent is not None:
                if _decide(dependent):
                    cancel(dependent)
                decided += 1
    return decided


def follow_ups(job):
    """A new job of a kind others follow: (kind, payload, options) of each dependent to enqueue
    with it, in the same transaction."""
    return [(name, {"of": job.payload, "after": job.kind},
             {"owner": job.owner, "depends_on": [job.pk]})
            for name in registry.followers(job.kind)]


def parents_of(job):
    return Job.objects.filter(child_links__child=job).order_by("pk")


def dependents_of(job):
    return Job.objects.filter(parent_links__parent=job).order_by("pk")


__all__ = ["FAILED_PARENT", "parent_ids", "check_on_failure", "lock_parents",
           "park_if_waiting", "link", "parents_ended", "hold_if_waiting", "decide_stranded",
           "follow_ups", "parents_of", "dependents_of"]
