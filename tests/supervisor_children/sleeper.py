"""A grandchild: optionally ignores SIGTERM, leaves the group, double-forks; then sleeps."""

import argparse
import os
import time

from tests.supervisor_children import ignore_term, report

parser = argparse.ArgumentParser()
parser.add_argument("--pids", required=True)
parser.add_argument("--role", required=True)
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--setsid", action="store_true")
parser.add_argument("--double-fork", action="store_true")
args = parser.parse_args()

if args.ignore_term:
    ignore_term()
if args.setsid:
    os.setsid()
if args.double_fork and os.fork():
    # The daemon's classic escape: its parent exits at once, so it is orphaned.
    os._exit(0)
report(args.pids, args.role)
while True:
    time.sleep(60)
