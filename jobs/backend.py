"""Django's Tasks API on the Haulage engine.

    TASKS = {"default": {"BACKEND": "jobs.backend.HaulageBackend", "QUEUES": ["default"]}}

Every `@task` function enqueued through this backend becomes a Job of kind
`django.task` whose payload names the function and carries its JSON
arguments; `manage.py runworker` runs it. The TaskResult id is the job's
public id. State mapping (also in docs/lifecycle.md):

    READY, PAUSED -> READY      RUNNING -> RUNNING      SUCCESSFUL -> SUCCESSFUL
    FAILED -> FAILED            CANCELLED -> FAILED, with a JobCancelled error

`started_at` is the first attempt's start, `last_attempted_at` the latest
one's. Arguments that cannot be stored as JSON raise TypeError at enqueue
(`jobs.exceptions.InvalidTaskArguments`), and nothing is written.

Haulage's extras go through `@task(...)`: `max_attempts`, `unique` (one live
job per function and arguments), `timeout` (seconds), `concurrency_limit`
(running at once across the deployment) and `rate_limit` ("10/m": starts per
period across the deployment, keyed by the function unless a call names its
key); per call, `task.with_job_options(unique_key=..., fingerprint=...,
concurrency_key=..., owner=..., rate_key=..., depends_on=[results or ids],
on_dependency_failure="cancel" | "run", replace=("payload", "run_after"))`.

A `@task(takes_context=True)` function gets a `HaulageTaskContext`: Django's
TaskContext (`task_result`, `attempt`) plus `should_stop()`, true once the
engine wants the attempt to end (a cancel or pause, the worker shutting down,
a timeout, a lost lease), and `progress(fraction, phase=, message=)`, written
to the job as a handler's is. A long task checks `context.should_stop()`
between steps and returns; the engine then records why it stopped, not the
return value. An attempt that never checks still ends as the engine decides
(its timeout is recorded when it runs out, a shutdown hands the job back after
its grace period), but a cancel or pause is recorded only when it returns.
"""

import hashlib
import json
import uuid
import weakref
from dataclasses import dataclass, field
from dataclasses import replace as replace_fields

from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from jobs import bounds, services, signals
from jobs.engine import payloads, registry
from jobs.exceptions import InvalidPayload, InvalidTaskArguments
from jobs.models import Job, JobStatus

KIND = "django.task"

STATUS_MAP = {
    JobStatus.READY: TaskResultStatus.READY,
    JobStatus.PAUSED: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCESSFUL: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


@dataclass(frozen=True, slots=True, kw_only=True, weakref_slot=True)
class HaulageTask(Task):
    max_attempts: int | None = None
    unique: bool = False
    timeout: float | None = None  # seconds; past it the attempt fails as "timeout"
    concurrency_limit: int | None = None
    rate_limit: str | None = None  # "10/m", "3/10s", "100/h"
    # Per-call options as (name, value) pairs, set by with_job_options().
    job_options: tuple = ()

    def with_job_options(self, *, unique_key=None, fingerprint=None, concurrency_key=None, owner=None,
                         rate_key=None, depends_on=None, on_dependency_failure=None, replace=None):
        """A copy of this task whose next enqueue carries these job options.

        `depends_on`: TaskResults (or their ids) that must all succeed before it
        runs; `replace`: with a unique key, a READY job holding it takes this
        call's arguments ("payload") and run_after.
        """
        options = {"unique_key": unique_key, "fingerprint": fingerprint,
                   "concurrency_key": concurrency_key, "owner": owner, "rate_key": rate_key,
                   "depends_on": tuple(depends_on) if depends_on is not None else None,
                   "on_dependency_failure": on_dependency_failure,
                   "replace": tuple(replace) if replace is not None else None}
        return replace_fields(
            self, job_options=tuple((k, v) for k, v in options.items() if v is not None))


@dataclass(frozen=True, slots=True, kw_only=True)
class HaulageTaskContext(TaskContext):
    """Django's TaskContext, and whether the engine wants this attempt to stop."""

    _job_context: object = field(repr=False, compare=False)  # the engine's JobContext

    def should_stop(self):
        """True once the attempt should end; return soon after (what is returned is not kept)."""
        return self._job_context.should_stop()

    def progress(self, fraction=None, *, phase=None, message=None, force=False):
        """Report progress on the job, at most about once per JOBS_PROGRESS_INTERVAL_SECONDS."""
        self._job_context.progress(fraction, phase=phase, message=message, force=force)


class HaulageBackend(BaseTaskBackend):
    task_class = HaulageTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        # Tasks this backend has validated, by id(): a Task validates itself with its
        # backend when it is made (and a changed TASKS setting makes new backends),
        # so enqueue() checks again only a task it has not seen.
        self._validated = weakref.WeakValueDictionary()

    def validate_task(self, task):
        """Checked at decoration time; never touches the database."""
        super().validate_task(task)
        if not isinstance(task, HaulageTask):
            return
        if task.max_attempts is not None and (not isinstance(task.max_attempts, int) or task.max_attempts < 1):
            raise InvalidTask("max_attempts must be a whole number of at least 1.")
        if task.timeout is not None and (not isinstance(task.timeout, (int, float)) or task.timeout <= 0):
            raise InvalidTask("timeout must be a positive number of seconds.")
        if task.concurrency_limit is not None and (
            not isinstance(task.concurrency_limit, int) or task.concurrency_limit < 1
        ):
            raise InvalidTask("concurrency_limit must be a whole number of at least 1.")
        if task.rate_limit is not None:
            try:
                bounds.parse_rate(task.rate_limit)
            except ValueError as exc:
                raise InvalidTask(f"rate_limit: {exc}") from None
        self._validated[id(task)] = task

    def enqueue(self, task, args, kwargs):
        if self._validated.get(id(task)) is not task:
            self.validate_task(task)
        arguments = _arguments(args, kwargs)
        options = dict(getattr(task, "job_options", ()))
        payload = {"task": task.module_path, "takes_context": task.takes_context, **arguments}
        if getattr(task, "timeout", None):
            payload["timeout"] = task.timeout
        unique_key = options.get("unique_key")
        if unique_key is None and getattr(task, "unique", False):
            unique_key = f"task:{task.module_path}:{_digest(arguments)}"
        keys, key_limits = [], {}
        if getattr(task, "concurrency_limit", None):
            keys.append(f"task:{task.module_path}")
            key_limits[keys[-1]] = task.concurrency_limit
        if options.get("concurrency_key"):
            keys.append(options["concurrency_key"])
        rate_limit = getattr(task, "rate_limit", None)
        rate_key = options.get("rate_key") or (f"task:{task.module_path}" if rate_limit else None)
        extra = {name: options[name] for name in ("depends_on", "on_dependency_failure", "replace")
                 if name in options}
        try:
            job = services.enqueue(
                KIND,
                payload,
                priority=task.priority,
                queue=task.queue_name,
                run_after=task.run_after,
                owner=options.get("owner"),
                unique_key=unique_key,
                fingerprint=options.get("fingerprint"),
                concurrency_keys=keys,
                limits=key_limits,
                rate_key=rate_key or "",
                rate_limit=rate_limit,
                max_attempts=getattr(task, "max_attempts", None),
                **extra,
            )
        except InvalidPayload as exc:
            # The arguments are all of the payload the caller chose; nothing was written.
            raise InvalidTaskArguments(f"Task arguments must be JSON: {exc}") from None
        result = to_task_result(job, task=task, backend=self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id):
        try:
            public_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        job = Job.objects.filter(public_id=public_id, kind=KIND).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return to_task_result(job, backend=self.alias)


# Values that Django's normalize_json returns as they are.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _arguments(args, kwargs):
    """The task's arguments as the payload stores them; nothing is written when they cannot be.

    The payload's own check (depth, NUL, size: jobs/engine/payloads.py) runs once, at
    enqueue, and enqueue() turns its refusal into InvalidTaskArguments.
    """
    arguments = {"args": list(args), "kwargs": dict(kwargs)}
    # Plain values under text keys (most calls) are JSON as they are: no walk to normalise.
    if all(type(value) in _PLAIN for value in args) and all(
            type(key) is str and type(value) in _PLAIN for key, value in kwargs.items()):
        return arguments
    try:
        # As Django's TaskResult normalises them (tuples become lists, bytes
        # text), so a type Django refuses is refused here in its words.
        arguments = normalize_json(arguments)
    except RecursionError:
        pass  # nested past Python's stack: the payload's depth check says so without recursing
    except (TypeError, ValueError) as exc:
        raise InvalidTaskArguments(f"Task arguments must be JSON: {exc}") from None
    return arguments


def _digest(arguments):
    """A short hash of the arguments, for a unique task's key; checked first, as hashing
    a nesting past Python's stack would fail before the payload's own check."""
    try:
        payloads.validate(arguments)
    except InvalidPayload as exc:
        raise InvalidTaskArguments(f"Task arguments must be JSON: {exc}") from None
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:32]


def _load_task(path):
    try:
        task = import_string(path)
    except ImportError:
        raise TaskResultDoesNotExist(f"The task {path!r} cannot be imported.") from None
    if not isinstance(task, Task):
        raise TaskResultDoesNotExist(f"{path!r} is not a task.")
    return task


def to_task_result(job, *, task=None, backend="default"):
    """The job as Django's TaskResult (built from the row in memory: no query)."""
    task = task or _load_task(job.payload["task"])
    errors = [
        TaskError(exception_class_path=e["exception_class_path"], traceback=e.get("traceback", ""))
        for e in job.errors or []
        if e.get("exception_class_path")
    ]
    if job.status == JobStatus.CANCELLED:
        errors.append(TaskError(exception_class_path="jobs.exceptions.JobCancelled",
                                traceback=job.error or "The job was cancelled."))
    result = _task_result(
        task=task,
        id=str(job.public_id),
        status=STATUS_MAP[job.status],
        enqueued_at=job.enqueued_at,
        # Django's started_at is the first attempt's start (older rows have
        # only the latest); last_attempted_at is the latest one's.
        started_at=job.first_started_at or job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=job.payload.get("args", []),
        kwargs=job.payload.get("kwargs", {}),
        backend=backend,
        errors=errors,
        worker_ids=list(job.worker_ids or []),
    )
    if job.status == JobStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _task_result(**fields):
    """Django's TaskResult less its __post_init__, which normalises args and kwargs to JSON's
    types: a job's come from its payload, JSON already (made so by _arguments at enqueue, or
    read from the row). Walking them again cost about 2 us of an enqueue's 40 us of Python
    (docs/performance.md, eleventh round)."""
    result = object.__new__(TaskResult)
    for name, value in fields.items():
        object.__setattr__(result, name, value)
    object.__setattr__(result, "_return_value", None)
    return result


@registry.kind(KIND, timeout_s=lambda payload: payload.get("timeout"))
def run_task(ctx, payload):
    """Run one `@task` function with its arguments; its return value must be JSON."""
    task = _load_task(payload["task"])
    result = to_task_result(ctx.job, task=task, backend=task.backend)
    task_started.send(HaulageBackend, task_result=result)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if payload.get("takes_context"):
        value = task.call(HaulageTaskContext(task_result=result, _job_context=ctx), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    return normalize_json(value)


def _send_task_finished(sender, job, **kwargs):
    if job.kind != KIND:
        return
    try:
        result = to_task_result(job)
    except TaskResultDoesNotExist:
        return
    task_finished.send(HaulageBackend, task_result=result)


signals.job_finished.connect(_send_task_finished, dispatch_uid="haulage-task-finished")
