"""Functions the scheduler tests' schedules fire (in django-q2's worker process).

A cluster knows them when this module is in its JOBS_HANDLER_MODULES.
"""

from jobs import schedules


@schedules.schedulable("note")
def note(label):
    return f"fired {label}"


@schedules.schedulable("explode")
def explode():
    raise RuntimeError("this scheduled function always fails")
