"""The no-op as a Django task, imported by django-tasks-db's db_worker by its path."""

from django.tasks import task

from bench.peers import marks


@task
def noop(label):
    marks.noop(label)
