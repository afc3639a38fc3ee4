"""The `runworker` process: the worker loop, heartbeats, inline and process execution.

`worker.py` reads top to bottom as the life of a worker's jobs; `process/`
holds both sides of a job run in its own child process. These modules may
import the rules, the reads, maintenance, the CV fleet's engine side and the
root; nothing below them imports the runtime.
"""
