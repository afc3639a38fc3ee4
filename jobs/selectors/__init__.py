"""Reads for pages, the JSON API, the admin and the CLI: where a job stands, finding jobs,
how a job is presented (present.py: one registry of kind prefixes).

Nothing here writes to the database. These modules may import the rules (`jobs.engine`) and
the foundations at the root; the runtime, maintenance, the CV fleet and the
admin read through them, never the reverse.
"""
