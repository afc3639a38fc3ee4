"""A child with a quiet phase of --quiet-s seconds, beating through it with --keepalive."""

import argparse
import contextlib
import time

from jobs.runtime.process import child as childside

parser = argparse.ArgumentParser()
parser.add_argument("--quiet-s", type=float, required=True)
parser.add_argument("--keepalive", action="store_true")
args = parser.parse_args()

childside.bootstrap()
with childside.keepalive(every_s=0.2) if args.keepalive else contextlib.nullcontext():
    time.sleep(args.quiet_s)  # a long post-processing step that reports nothing
childside.alive()
