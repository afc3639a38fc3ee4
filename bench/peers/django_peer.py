"""What the Django-based peers share: the settings module, setup and migrations."""

from bench.peers.base import Peer

SETTINGS_MODULE = "bench.peers.django_settings"


class DjangoPeer(Peer):
    has_transaction = True

    def environ(self):
        return {
            "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
            "BENCH_PEERS_DATABASE_URL": self.database_url,
        }

    def open(self):
        import django

        # environ() is in os.environ by now; a second call is a no-op.
        django.setup()

    def prepare(self):
        from django.core.management import call_command

        self.open()
        call_command("migrate", verbosity=0, interactive=False)

    def transaction(self):
        from django.db import transaction

        return transaction.atomic()

    def close(self):
        from django.db import connections

        connections.close_all()
