"""A psycopg connection of its own to the test database, beside Django's."""

import psycopg
from django.db import connection


def other_connection(**options):
    """A new connection with Django's settings for the default database (less what only
    Django's own connection takes), e.g. to hold a lock while the code under test runs."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, **options)
