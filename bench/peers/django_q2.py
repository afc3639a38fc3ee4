"""django-q2 with its ORM broker on PostgreSQL, workers run by `manage.py qcluster`."""

from bench.peers.base import python
from bench.peers.django_peer import DjangoPeer

NOOP = "bench.peers.marks.noop"


class DjangoQ2Peer(DjangoPeer):
    name = "django-q2"
    title = "django-q2 (ORM broker)"
    packages = ("django-q2", "django")
    configuration = (
        "ORM broker on PostgreSQL; changed: workers=1 per qcluster process, timeout=60 s, "
        "retry=120 s, CONN_MAX_AGE (method line); defaults kept: poll 0.2 s, bulk 1, "
        "save_limit 250, recycle 500, INFO logging; enqueue = async_task(); no bulk enqueue call"
    )

    def enqueue(self, label):
        from django_q.tasks import async_task

        async_task(NOOP, label)

    def pending(self):
        from django_q.models import OrmQ

        # The monitor process deletes a task's broker row once its result is saved.
        return OrmQ.objects.count()

    def worker_argv(self):
        return [python(), "-m", "django", "qcluster"]
