"""The procrastinate App and its no-op task, loaded by `procrastinate --app=...`."""

import os

from procrastinate import App, PsycopgConnector

from bench.peers import marks

# The pool opens only when the app does, so importing this needs no database.
app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PEERS_DATABASE_URL", "")))


@app.task(name="noop")
def noop(label):
    marks.noop(label)
