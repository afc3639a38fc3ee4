"""Waiting for what another process will do.

A wait's timeout is patience, not an assertion: a test that promises a
reaction time measures it and asserts that bound itself. On a machine busy
with the parallel phase a Python process can take several times longer to
start than on an idle one, so every wait is stretched by `TEST_PATIENCE`
(default 3). A wait that runs out still fails the test.
"""

import os
import time

PATIENCE = float(os.environ.get("TEST_PATIENCE") or 3)


def wait_until(predicate, timeout=20, interval=0.05):
    """The predicate's first true value within `timeout` × PATIENCE seconds, else False."""
    deadline = time.monotonic() + timeout * PATIENCE
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_for(predicate, timeout=20, interval=0.05):
    """Like `wait_until`, but a wait that runs out fails with AssertionError."""
    value = wait_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"condition not met within {timeout * PATIENCE:g} s: {predicate}")
    return value
