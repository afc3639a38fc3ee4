"""Haulage and other Django/Python job queues, measured with one method in one run.

    python -m bench.peers [--quick] [--systems raw,procrastinate] [--repeat N]

Words used here:

peer     one queue system under test, driven through `base.Peer` (one module each).
label    the integer a job carries; the no-op job writes it back with its times.
mark     one line the no-op job writes when it runs: label, start, finish.
trial    one process that measures one figure group of one peer in one fresh database.
run      one repetition of every figure group of one peer.

The method, the same for every peer:

- A throw-away PostgreSQL (tests/services.py) on a loopback port; each peer's
  schema is built once in a template database and every trial gets a fresh
  copy of it, so no figure sees another figure's rows.
- enqueue 1-by-1: N jobs, one call and one commit each (jobs/s).
- enqueue 1-by-1 in one transaction: N calls, then one commit (jobs/s), or
  "n/a" when the peer cannot enqueue inside its caller's transaction.
- bulk enqueue: N jobs through the peer's bulk call in chunks (jobs/s), or
  "n/a" when the peer has none.
- throughput: N pre-enqueued no-op jobs, then 1 (or 2) real worker processes
  started with the peer's own command; jobs/s from the first job's start to
  the last job's finish, both read from the marks.
- latency: one idle worker; jobs enqueued one at a time at about 20/s; each
  job's start (from its mark) minus the wall-clock time just before its
  enqueue call; p50 and p95.
- every figure repeated (3 times by default), medians reported.
"""
