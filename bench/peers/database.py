"""The throw-away PostgreSQL server and the fresh databases cut from each peer's template."""

import psycopg
from psycopg import sql


class Server:
    """A PostgreSQL server started by tests.services.start_postgres, reached as superuser."""

    def __init__(self, port):
        self.port = port
        self.admin = psycopg.connect(self.url("postgres"), autocommit=True)

    def url(self, database):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def version(self):
        return self.admin.execute("SHOW server_version").fetchone()[0]

    def settings(self):
        """The non-default settings that change the figures (durability is off here)."""
        names = ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections")
        rows = self.admin.execute(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
            (list(names),),
        )
        return {name: f"{setting}{'' if unit is None else ' ' + unit}" for name, setting, unit in rows}

    def create(self, name, *, template=None):
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            # A copy of the template is a fresh database with the schema in place,
            # far faster than running migrations again for every trial.
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self.admin.execute(query)
        return self.url(name)

    def drop(self, name):
        # FORCE ends the connections a killed worker may have left behind.
        self.admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def close(self):
        self.admin.close()
