"""One figure group of one peer in one fresh database, in a process of its own.

    python -m bench.peers.trial PEER ACTION --database-url URL --out FILE [...]

A process per trial because Django configures itself once per process and
every trial has its own database. The figures go to --out as JSON:
{"figures": {...}} on success, {"unavailable": why} when the peer cannot run
here (the Haulage adapter before the engine exists), {"error": traceback}.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.peers.base import PEERS, load_peer
from bench.peers.marks import MARKS_DIR_ENV, MarkReader
from bench.peers.workers import Workers

WARM_UP_LABEL = -1
IDLE_BEFORE_LATENCY_S = 1.0
PENDING_POLL_S = 0.005
MARKS_POLL_S = 0.02


def prepare(peer, options, reader):
    peer.prepare()
    return {}


def serial(peer, options, reader):
    """Enqueue 1-by-1 into an empty queue, then drain it with one worker process."""
    peer.open()
    labels = range(options.jobs)
    started = time.perf_counter()
    for label in labels:
        peer.enqueue(label)
    enqueue = options.jobs / (time.perf_counter() - started)
    return {"enqueue": enqueue, **_drain(peer, options, reader, labels, 1)}


def atomic(peer, options, reader):
    """Enqueue 1-by-1 inside one transaction, the commit included; nothing runs them."""
    peer.open()
    started = time.perf_counter()
    with peer.transaction():
        for label in range(options.jobs):
            peer.enqueue(label)
    return {"enqueue_atomic": options.jobs / (time.perf_counter() - started)}


def bulk(peer, options, reader):
    """Bulk-enqueue (or 1-by-1, untimed, when the peer has no bulk call), then 2 processes."""
    peer.open()
    labels = range(options.jobs)
    bulk_enqueue = None
    if peer.has_bulk:
        started = time.perf_counter()
        for first in range(0, options.jobs, options.bulk_size):
            peer.enqueue_bulk(list(labels[first:first + options.bulk_size]))
        bulk_enqueue = options.jobs / (time.perf_counter() - started)
    else:
        for label in labels:
            peer.enqueue(label)
    return {"bulk_enqueue": bulk_enqueue, **_drain(peer, options, reader, labels, 2)}


def latency(peer, options, reader):
    """Jobs one at a time at `rate` per second into one idle worker; start minus enqueue."""
    peer.open()
    labels = range(options.latency_jobs)
    sent = {}
    with Workers(peer, 1, log_prefix=options.log_prefix) as workers:
        # The warm-up job proves the worker is up; the pause lets it go idle.
        peer.enqueue(WARM_UP_LABEL)
        reader.wait_for([WARM_UP_LABEL], stall_timeout_s=options.stall_timeout_s,
                        alive=workers.check_alive)
        time.sleep(IDLE_BEFORE_LATENCY_S)
        period_s, due = 1 / options.rate, time.monotonic()
        for label in labels:
            sent[label] = time.time()
            peer.enqueue(label)
            due += period_s
            time.sleep(max(0.0, due - time.monotonic()))
        reader.wait_for(labels, stall_timeout_s=options.stall_timeout_s,
                        alive=workers.check_alive)
    samples_ms = [(reader.marks[label].start - sent[label]) * 1000 for label in labels]
    cuts = statistics.quantiles(samples_ms, n=20, method="inclusive")
    return {"latency_p50_ms": statistics.median(samples_ms), "latency_p95_ms": cuts[18]}


def _drain(peer, options, reader, labels, processes):
    """Jobs/s from first start to last completion, the queue's completion lag, and re-runs."""
    with Workers(peer, processes, log_prefix=options.log_prefix) as workers:
        reader.wait_for(labels, stall_timeout_s=options.stall_timeout_s,
                        alive=workers.check_alive, interval_s=MARKS_POLL_S)
        first_start, last_finish = reader.span(labels)
        # Already recorded when the last mark was seen (within one marks poll):
        # the last finish is the end. Otherwise the end is when the queue caught up.
        done = last_finish
        deadline = time.monotonic() + options.stall_timeout_s
        while peer.pending():
            if time.monotonic() > deadline:
                raise TimeoutError(f"every job ran, but the queue did not record them all as "
                                   f"finished within {options.stall_timeout_s:g} s.")
            workers.check_alive()
            time.sleep(PENDING_POLL_S)
            done = time.time()
    return {
        f"throughput_{processes}": len(labels) / (done - first_start),
        f"completion_lag_{processes}_s": done - last_finish,
        f"reruns_{processes}": reader.runs - len(reader.marks),
    }


ACTIONS = {"prepare": prepare, "serial": serial, "atomic": atomic, "bulk": bulk,
           "latency": latency}


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.peers.trial")
    parser.add_argument("peer", choices=PEERS)
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--log-prefix", required=True)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--bulk-size", type=int, default=1000)
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="latency jobs per second")
    parser.add_argument("--stall-timeout-s", type=float, default=60.0)
    return parser.parse_args(argv)


def main(argv=None):
    options = parse_args(sys.argv[1:] if argv is None else argv)
    # SIGTERM from the harness unwinds like an exception, so the workers are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    scratch_dir = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    marks_dir = scratch_dir / "marks"
    marks_dir.mkdir()
    os.environ[MARKS_DIR_ENV] = str(marks_dir)
    try:
        peer = load_peer(options.peer)(database_url=options.database_url, scratch_dir=scratch_dir)
        os.environ.update(peer.environ())
        try:
            result = {"figures": ACTIONS[options.action](peer, options, MarkReader(marks_dir))}
        finally:
            peer.close()
    except NotImplementedError as error:
        result = {"unavailable": str(error) or "not implemented"}
    except Exception:  # reported to the harness, which goes on with other peers
        result = {"error": traceback.format_exc()}
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)
    options.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
