"""django-tasks-db: Django's Tasks API on its database backend, run by `db_worker`."""

from bench.peers.base import python
from bench.peers.django_peer import DjangoPeer


class TasksDbPeer(DjangoPeer):
    name = "django-tasks-db"
    title = "django-tasks-db"
    packages = ("django-tasks-db", "django")
    configuration = (
        "DatabaseBackend as TASKS['default'] on PostgreSQL; db_worker defaults (interval 1 s, "
        "one task at a time); changed: --no-startup-delay (a random pause of up to 1 s at "
        "start-up would skew the 2-process start), CONN_MAX_AGE (method line); "
        "enqueue = task.enqueue(); the Tasks API has no bulk enqueue"
    )

    def enqueue(self, label):
        from bench.peers.tasks_db_jobs import noop

        noop.enqueue(label)

    def pending(self):
        from django_tasks_db.models import DBTaskResult

        return DBTaskResult.objects.count() - DBTaskResult.objects.finished().count()

    def worker_argv(self):
        return [python(), "-m", "django", "db_worker", "--no-startup-delay"]
