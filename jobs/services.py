"""The engine's verbs, one function each, for the apps built on it and for its own upper layers.

Each name here is the function itself, bound from the module of the rules
that holds it (no wrapper: a call costs what it cost before):

    jobs/engine/enqueue.py      enqueue, enqueue_many, build_job, resolve
    jobs/engine/transitions.py  the guarded UPDATEs of a running attempt, and
                                what happens after a job ends
    jobs/engine/actions.py      people's verbs, and `LEGAL`: where each may act
    jobs/engine/limits.py       a key's limit, a rate

Most apps need only the names `jobs` itself exports (jobs/__init__.py).
"""

from jobs.engine.actions import (
    LEGAL,
    cancel,
    cancel_matching,
    command_worker,
    move_down,
    move_to_front,
    move_up,
    pause,
    resume,
    retry,
    retry_matching,
    set_priority_tier,
    set_queue,
)
from jobs.engine.enqueue import build_job, enqueue, enqueue_many, resolve
from jobs.engine.limits import set_limit, set_rate
from jobs.engine.transitions import (
    MAX_ERRORS_KEPT,
    cancel_dependent,
    complete_many,
    error_entry,
    fail_unreadable,
    fail_unserved,
    held,
    leave_running,
    lock_lease,
    note_read,
    renew_leases,
    report_progress,
)

__all__ = [
    "build_job", "enqueue", "enqueue_many", "resolve",
    "held", "leave_running", "complete_many", "error_entry", "lock_lease", "report_progress",
    "renew_leases", "note_read", "fail_unserved", "fail_unreadable", "cancel_dependent",
    "cancel", "cancel_matching", "pause", "resume", "retry", "retry_matching", "move_to_front",
    "move_up", "move_down", "set_priority_tier", "set_limit", "set_rate", "set_queue",
    "command_worker", "LEGAL", "MAX_ERRORS_KEPT",
]
