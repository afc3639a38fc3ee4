"""Deleting old history: finished jobs and their events, in short batches.

What users see never lives only on a job row. A domain row (a Download, an
Insight) keeps its own final state and points at its Job with a nullable
foreign key declared `on_delete=models.SET_NULL`, so pruning a job clears the
pointer and leaves the row. A foreign key to Job that would cascade (or
protect) is refused before anything is deleted: see `unsafe_relations`.

The per-minute rollup and queue samples (jobs/engine/rollup.py, jobs/maintenance/sampling.py)
older than the same age go with them, so the dashboard and `/metrics` never
describe a span whose jobs are gone, and the tables stay bounded.

Each batch is its own short transaction that locks only the rows it deletes
(skipping rows someone else holds), so pruning millions of rows never blocks
the claim, a staff action or a retry for longer than one batch.
"""

import time
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs.engine import queries, rollup
from jobs.maintenance import sampling
from jobs.models import FINISHED_STATUSES, FailureNotice, Job, JobDependency, JobEvent

BATCH_SIZE = 1000


# The engine's own rows about a job, which go with it: its events, and its
# links to parents and dependents (a finished job's dependents were decided
# when it finished).
ENGINE_ROWS = (JobEvent, JobDependency)


def unsafe_relations(model=Job):
    """Foreign keys to `model` whose rows a delete would remove or block (the engine's own aside)."""
    allowed = (models.SET_NULL, models.DO_NOTHING, models.SET_DEFAULT)
    return [
        f"{rel.related_model._meta.label}.{rel.field.name}"
        for rel in model._meta.related_objects
        if rel.related_model not in ENGINE_ROWS and rel.on_delete not in allowed
    ]


@dataclass
class Pruned:
    jobs: int = 0
    events: int = 0
    batches: int = 0
    rollups: int = 0  # per-minute rows: rollups, queue samples, idle failure notices


def prune_finished(older_than, *, batch_size=BATCH_SIZE, pause_s=0.0, now=None):
    """Delete jobs that finished more than `older_than` ago, with their events, batch by batch.

    Live jobs (READY, RUNNING, PAUSED) are never touched: every statement
    names the finished states. Returns what was deleted.
    """
    unsafe = unsafe_relations()
    if unsafe:
        raise ImproperlyConfigured(
            _("Pruning would delete or be blocked by rows that point at jobs (%(fields)s); "
              "declare those foreign keys with on_delete=models.SET_NULL.")
            % {"fields": ", ".join(unsafe)}
        )
    cutoff = (now or timezone.now()) - older_than
    old = Job.objects.filter(status__in=FINISHED_STATUSES, finished_at__lt=cutoff)
    pruned = Pruned()
    skip_locked = queries.is_postgres()
    while True:
        with transaction.atomic():
            # Lock the batch (the finished-jobs partial index finds it oldest
            # first) and skip rows someone holds: a retry racing this batch
            # either waits and then finds its job gone, or keeps it live.
            ids = list(
                old.order_by("finished_at").select_for_update(skip_locked=skip_locked)
                .values_list("pk", flat=True)[:batch_size]
            )
            if not ids:
                break
            events, _by_model = JobEvent.objects.filter(job_id__in=ids).delete()
            # Through the ORM, so domain foreign keys are set to NULL as declared.
            _count, by_model = Job.objects.filter(pk__in=ids, status__in=FINISHED_STATUSES).delete()
        pruned.jobs += by_model.get(Job._meta.label, 0)
        pruned.events += events
        pruned.batches += 1
        if len(ids) < batch_size:
            break
        if pause_s:
            time.sleep(pause_s)  # let replicas and autovacuum keep up on very large prunes
    pruned.rollups = rollup.prune(cutoff) + sampling.prune(cutoff) + _prune_notices(cutoff)
    return pruned


def _prune_notices(cutoff):
    """Failure notice rows with nothing pending and nothing said since the cutoff."""
    idle = FailureNotice.objects.filter(pending=0, scheduled=False, sent_at__lt=cutoff)
    deleted, _by_model = idle.delete()
    return deleted
