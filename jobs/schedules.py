"""The functions a schedule may call: chosen from a list, never named by import path.

django-q2 imports and calls whatever dotted path a Schedule row (or its hook)
holds, so whoever may edit a schedule could otherwise run any function of
any installed module (`subprocess.check_call`). Apps declare the functions
their schedules fire instead, in their `scheduled` modules:

    from jobs import schedules

    @schedules.schedulable(_("Storage housekeeping"))
    def housekeeping():
        ...

The Schedules admin offers only these (jobs/admin/schedules.py), and a firing
of anything else becomes a refusal before it is queued (`refuse_unregistered`):
the cluster logs it, records it as a failed task and never imports the path.
"""

import ast
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext as _

from jobs import conf
from jobs.exceptions import JobError

log = logging.getLogger("jobs.scheduler")

REFUSED = "jobs.schedules.refused"  # what a refused firing runs instead


class NotSchedulable(JobError):
    """A schedule named a function no app registered with @schedules.schedulable."""


@dataclass(frozen=True)
class Function:
    path: str  # what a Schedule row stores: "downloads.scheduled.housekeeping"
    func: Callable
    label: Any = None  # what staff choose it by (a lazy translation)

    def __str__(self):
        return f"{self.label} ({self.path})" if self.label else self.path


_functions: dict[str, Function] = {}
_discovered = False


def schedulable(label=None):
    """Let schedules call the decorated module-level function, shown to staff as `label`."""

    def register(func):
        path = path_of(func)
        if "<" in path:
            raise ValueError(f"{path}: a schedule calls a module-level function, by its path")
        _functions[path] = Function(path, func, label)
        return func

    return register


def path_of(func):
    return f"{func.__module__}.{func.__qualname__}"


def discover():
    """Import every app's `scheduled` module and JOBS_HANDLER_MODULES, once per process: the
    web (the admin's choices) and the cluster (the guard) both ask before either fires."""
    global _discovered
    if not _discovered:
        autodiscover_modules("scheduled")
        for module in conf.handler_modules():
            import_module(module)
        _discovered = True


def get(path):
    """The registered function stored as `path`, or None."""
    discover()
    return _functions.get(path) if isinstance(path, str) else None


def choices():
    discover()
    return sorted(((f.path, str(f)) for f in _functions.values()), key=lambda choice: choice[1])


# --- Arguments, as django-q2's scheduler reads a schedule's text fields -----------------


def _literal(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(text) from None


def _keywords(text):
    """django-q2's other kwargs syntax, `a=1, b='x'`: keywords of a call, literals only."""
    try:
        body = ast.parse(f"f({text})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise ValueError(text) from None
    if (not isinstance(body, ast.Call) or not isinstance(body.func, ast.Name) or body.args
            or any(keyword.arg is None for keyword in body.keywords)):
        raise ValueError(text)
    return {keyword.arg: _literal(keyword.value) for keyword in body.keywords}


def _keywords_or_dict(text):
    try:
        value = _literal(text)
    except ValueError:
        return _keywords(text)
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValueError(text)
    return value


def arguments(args_text, kwargs_text):
    """The (args, kwargs) a schedule's `args` and `kwargs` fields give its function, as
    django_q/scheduler.py makes them; ValueError for text it would fail on or drop."""
    try:
        args = _literal(args_text) if args_text else ()
    except ValueError:
        raise ValueError(_("The arguments must be a Python literal, such as 'a', 1 or ('a', 1).")) from None
    try:
        kwargs = _keywords_or_dict(kwargs_text) if kwargs_text else {}
    except ValueError:
        raise ValueError(_("The keyword arguments must be a dict literal such as {'days': 7}, "
                           "or days=7.")) from None
    if "q_options" in kwargs:
        # The scheduler reads it as django-q2's own options (a hook, a cluster), not arguments.
        raise ValueError(_("q_options is not an argument a schedule may set."))
    return args if isinstance(args, tuple) else (args,), kwargs


def check_call(path, args_text="", kwargs_text="", date_kwarg="", hook=""):
    """Raise ValueError with a sentence for staff unless the schedule's firing would call
    registered functions with arguments they take (a hook gets the finished task)."""
    args, kwargs = arguments(args_text, kwargs_text)
    if date_kwarg:
        kwargs[date_kwarg] = ""  # the scheduler adds the intended date under this name
    _bind(path, args, kwargs)
    if hook:
        _bind(hook, (None,), {})


def _bind(path, args, kwargs):
    function = get(path)
    if function is None:
        raise ValueError(_("%(function)s is not a function schedules may call.") % {"function": path})
    try:
        inspect.signature(function.func).bind(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(_("%(function)s does not take these arguments: %(error)s")
                         % {"function": function, "error": exc}) from None


# --- The guard, in every process that queues a firing -------------------------------------


def refused(path):
    """Run instead of a function no app registered: the failed task says why."""
    raise NotSchedulable(f"{path!r} is not a registered schedule function (jobs/schedules.py); "
                         "nothing was run.")


def _name(func):
    return func if isinstance(func, str) or func is None else path_of(func)


def refuse_unregistered(sender, task, **kwargs):
    """django-q2's pre_enqueue: a task whose function or hook is not registered is queued as a
    call of `refused` instead, before it is signed, so the worker never imports the path."""
    func, hook = _name(task["func"]) or "", _name(task.get("hook"))
    calls = [func, hook] if hook else [func]
    unknown = next((path for path in calls if get(path) is None), None)
    if unknown is None:
        return
    log.error("Not running %s for %s: %s is not a registered schedule function",
              func, task.get("group") or task["name"], unknown)
    for option in ("hook", "chain", "cached"):  # a refusal calls nothing more, and is recorded
        task.pop(option, None)
    task.update(func=REFUSED, args=(unknown,), kwargs={})


try:
    from django_q.signals import pre_enqueue
except ImportError:  # no django-q2, no schedules to guard
    pass
else:
    pre_enqueue.connect(refuse_unregistered, dispatch_uid="jobs.schedules.refuse_unregistered")
