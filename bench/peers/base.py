"""The interface every peer implements, and where each peer lives."""

import importlib
import sys

# --systems name -> the Peer class; imported only when chosen, so a peer whose
# package is missing breaks only its own row. The order is the table's order.
PEERS = {
    "haulage": "bench.peers.haulage.HaulagePeer",
    "raw": "bench.peers.raw.RawPeer",
    "procrastinate": "bench.peers.procrastinate.ProcrastinatePeer",
    "django-tasks-db": "bench.peers.tasks_db.TasksDbPeer",
    "django-q2": "bench.peers.django_q2.DjangoQ2Peer",
}


def load_peer(name):
    module_path, _, class_name = PEERS[name].rpartition(".")
    return getattr(importlib.import_module(module_path), class_name)


class Peer:
    """One queue system, driven by the harness through these methods alone.

    A trial process builds one Peer for one fresh database, puts `environ()`
    into its own environment (worker processes inherit it), then calls either
    `prepare()` (once per peer, on the template database) or `open()`, the
    enqueue methods, `pending()` and `close()`; it starts `worker_argv()` as
    real subprocesses. Every job a peer enqueues must, when a worker runs it,
    call `bench.peers.marks.noop(label)` and nothing else.
    """

    name = ""  # the --systems key
    title = ""  # the row label in the table
    packages = ()  # distributions whose installed versions the report names
    configuration = ""  # one sentence: how it runs, and every setting changed from its defaults
    has_bulk = False  # whether enqueue_bulk() exists; "n/a" in the table otherwise
    has_transaction = False  # whether transaction() exists; "n/a" in the table otherwise

    def __init__(self, *, database_url, scratch_dir):
        self.database_url = database_url  # a fresh database of this trial's own
        self.scratch_dir = scratch_dir  # a Path for files, removed when the trial ends

    def environ(self):
        """Environment variables this process and the workers need (settings module, database)."""
        return {}

    def prepare(self):
        """Create the peer's schema in an empty database (migrations, schema files)."""
        raise NotImplementedError

    def open(self):
        """Get ready to enqueue: configure the framework, open connections."""

    def enqueue(self, label):
        """Enqueue one no-op job for `label`, committed when this returns."""
        raise NotImplementedError

    def enqueue_bulk(self, labels):
        """Enqueue one no-op job per label with the peer's bulk call, committed on return."""
        raise NotImplementedError

    def transaction(self):
        """A context manager: enqueue() calls inside it commit together when it exits."""
        raise NotImplementedError

    def pending(self):
        """How many enqueued jobs the queue's own rows do not yet record as finished.

        Throughput ends at the later of the last job's finish and the moment
        this reaches 0, so completions a queue writes late (another process,
        a batch flush) are part of the measure.
        """
        raise NotImplementedError

    def worker_argv(self):
        """The command line of one worker process (run from the repository root)."""
        raise NotImplementedError

    def close(self):
        """Release what open() took."""


def python():
    """The interpreter of this environment, for worker command lines."""
    return sys.executable
