"""A child that beats and may ignore SIGTERM, with the grandchildren asked for."""

import argparse
import os
import subprocess
import time

from jobs.runtime.process import child as childside
from tests.supervisor_children import argv, ignore_term, report

parser = argparse.ArgumentParser()
parser.add_argument("--pids", required=True)
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--grandchild", action="store_true", help="one in the child's group")
parser.add_argument("--escapee", action="store_true", help="one that calls setsid")
parser.add_argument("--scrubbed-escapee", action="store_true",
                    help="setsid, an empty environment (no marker) and a double fork")
args = parser.parse_args()

childside.bootstrap()
if args.ignore_term:
    ignore_term()
term = ["--ignore-term"] if args.ignore_term else []
if args.grandchild:
    subprocess.Popen(argv("sleeper", "--pids", args.pids, "--role", "grandchild", *term))
if args.escapee:
    subprocess.Popen(argv("sleeper", "--pids", args.pids, "--role", "escapee", "--setsid", *term))
if args.scrubbed_escapee:
    # Launched from a short-lived parent that exits: the daemon reparents to
    # the nearest subreaper, and has no HAULAGE_JOB_MARKER to be found by.
    subprocess.run(
        argv("sleeper", "--pids", args.pids, "--role", "scrubbed", "--setsid", "--double-fork",
             *term),
        env={}, check=True,
    )
report(args.pids, "child")
assert os.getpgrp() == os.getpid()
while True:
    childside.alive()
    time.sleep(0.05)
