import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction


class Command(BaseCommand):
    help = "Create an 'admin' superuser with a random password if no superuser exists yet."

    def handle(self, *args, **options):
        User = get_user_model()
        login = f"http://{os.environ.get('HAULAGE_BIND', '127.0.0.1:8000')}/accounts/login/"
        password_file = settings.VAR_DIR / "admin-password.txt"
        if User.objects.filter(is_superuser=True).exists():
            hint = f" (see {password_file})" if password_file.exists() else ""
            self.stdout.write(f"An admin account exists; log in at {login}{hint}")
            return
        password = secrets.token_urlsafe(12)
        # The account commits only once its password is saved: stopped in
        # between, the next run creates it again rather than keep one nobody
        # can log in to.
        with transaction.atomic():
            User.objects.create_superuser("admin", "", password)
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(f"admin\n{password}\n")
            password_file.chmod(0o600)
        self.stdout.write(self.style.SUCCESS(
            f"Created the admin account. Log in at {login} "
            f"as 'admin' with password '{password}' (saved in {password_file})."
        ))
