"""The rules of the queue: what may be enqueued, claimed, retried, cancelled; how an attempt ends.

Everything that changes a job's state is decided here, and every raw SQL
statement is named here (`queries.py`). These modules import only each other
and the foundations at the root of `jobs/` (models, conf, bounds, exceptions,
signals, egress); they never import the reads, the runtime, the CV fleet,
maintenance or the admin, so a rule can be read without them.
"""
