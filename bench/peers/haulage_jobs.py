"""The no-op job, as a Django @task on Haulage's backend."""

from django.tasks import task

from bench.peers import marks


@task
def noop(label):
    marks.noop(label)
