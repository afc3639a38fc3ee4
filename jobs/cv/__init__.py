"""The CV fleet: jobs of kinds in the `redis` mode, run by CV workers through Redis.

    clients.py    the one place Redis clients are built (and the local mode's fakeredis)
    transport.py  the Redis protocol: queues, processing lists, status keys, heartbeats
    monitor.py    engine side: a runworker publishes CV jobs and watches them to the end
    worker.py     CV worker side (`manage.py runcvworker`): takes, runs, reports back
    files.py      durable files: a result is whole or absent, never torn

Handlers use the engine's contract, `handler(ctx, payload)` with
`ctx.progress(...)` and `ctx.should_stop()`, and register with
`@cv_handler(type)` in an app's `cvhandlers` module or a module named in
JOBS_HANDLER_MODULES. A CV machine may have a GPU and no database; the Job
row stays the durable record, and a result is a file on shared storage.

The CV worker side imports no model and no rule: it runs where there is no
database. The monitor, the engine's side, may import the rules and the root;
the runtime hosts it, and nothing below the runtime imports this folder.
"""
