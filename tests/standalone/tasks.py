"""The standalone project's two tasks (see settings.py beside this file)."""

from django.tasks import task


@task
def add(a, b):
    return a + b


@task(takes_context=True)
def shout(context, word):
    return {"word": word.upper(), "attempt": context.attempt}
