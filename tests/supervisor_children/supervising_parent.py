"""A stand-in worker: supervises a stubborn family, reports the pids, then waits to be killed."""

import sys
import time

from jobs.runtime.process.parent import Child
from tests.supervisor_children import ROOT, argv, report

pids = sys.argv[1]
child = Child.spawn(
    argv("family", "--pids", pids, "--ignore-term", "--grandchild", "--escapee"), cwd=ROOT,
)
report(pids, "parent")
while True:
    child.wait(0.25)
    time.sleep(0.25)
