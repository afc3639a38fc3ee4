"""Django @task functions used by the Tasks backend tests."""

import sys

from django.tasks import task


@task
def add(a, b):
    return a + b


@task(priority=5)
def shout(text):
    return text.upper()


@task(takes_context=True)
def which_attempt(context, fail_until=1):
    if context.attempt < fail_until:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(max_attempts=3)
def flaky(fail_until=3):
    from django.tasks import TaskContext  # noqa: F401 - not used, only proves imports work in workers

    raise ValueError("always")


@task(max_attempts=2, timeout=0.5)
def slow(seconds):
    import time

    time.sleep(seconds)


@task(unique=True)
def once_per_argument(value):
    return value


@task
def returns_a_set():
    return {1, 2}


@task(queue_name="default", concurrency_limit=1)
def exclusive():
    return "ok"


@task(max_attempts=1)
def exits(code=3):
    sys.exit(code)


@task(max_attempts=1)
def interrupts():
    raise KeyboardInterrupt("interrupted by the task itself")


@task(max_attempts=2, takes_context=True)
def exits_on_the_first_attempt(context):
    if context.attempt == 1:
        sys.exit("the first attempt exits")
    return context.attempt


@task
def snooze_for(seconds):
    from jobs.exceptions import Snooze

    raise Snooze(seconds, "come back later")


@task(takes_context=True)
def describes_its_context(context):
    from django.tasks import TaskContext

    return {"task_context": isinstance(context, TaskContext), "id": context.task_result.id,
            "attempt": context.attempt, "should_stop": context.should_stop()}


@task(takes_context=True)
def works_until_stopped(context, limit_s=300):
    """Steps until the engine asks it to stop (or `limit_s` passes, when it succeeds instead).

    Its first progress message is its result's id, so a test can see it has started.
    """
    import time

    context.progress(phase="working", message=context.task_result.id, force=True)
    deadline = time.monotonic() + limit_s
    while not context.should_stop():
        if time.monotonic() >= deadline:
            return "never asked to stop"
        time.sleep(0.02)
    return "stopped"
