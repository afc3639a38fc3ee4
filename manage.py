#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line

    from project.env import SettingsError

    try:
        execute_from_command_line(sys.argv)
    except SettingsError as exc:
        # A configuration mistake deserves a sentence, not a traceback.
        sys.exit(f"haulage: {exc}")


if __name__ == "__main__":
    main()
