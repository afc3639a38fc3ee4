"""The engine's own job kinds (imported by every process at start-up).

jobs.prune           delete finished jobs older than JOBS_PRUNE_AFTER (the `prunejobs`
                     command's work), fired by the "Prune job history" schedule
jobs.notify_failure  tell JOBS_FAILURE_NOTIFY that jobs failed (jobs/notices.py)
"""

from django.utils.translation import gettext_lazy as _

from jobs import conf, notices
from jobs.engine.registry import kind
from jobs.maintenance import prune


@kind("jobs.prune", label=_("Job history pruning"), unique_key=lambda payload, owner: "jobs.prune", max_attempts=3)
def prune_history(ctx, payload):
    pruned = prune.prune_finished(conf.prune_after())
    return {"jobs": pruned.jobs, "events": pruned.events, "batches": pruned.batches,
            "rollups": pruned.rollups}


# Ahead of the queue's ordinary work: an outage is when the queue is longest.
@kind(notices.KIND, label=_("Failure notice"), priority=50, max_attempts=5, backoff_base_s=30,
      finished=notices.settle)
def notify_failure(ctx, payload):
    return notices.send(payload)
