"""Functions the scheduler tests' schedules fire (in django-q2's worker process)."""


def note(label):
    return f"fired {label}"


def explode():
    raise RuntimeError("this scheduled function always fails")
