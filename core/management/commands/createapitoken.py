from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for a user and print it (it is shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username", help="the user the token acts as")
        parser.add_argument("--name", default="", help="a label to tell tokens apart")

    def handle(self, *args, username, name, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"No user named {username!r}.") from None
        _, raw = ApiToken.issue(user=user, name=name)
        self.stdout.write(raw)
