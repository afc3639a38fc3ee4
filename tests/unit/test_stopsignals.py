"""A stop signal that lands while the main thread holds an event's lock still stops.

Each scenario runs in a process of its own: one that hangs is killed at the
timeout and reported, instead of hanging the suite. The main thread takes the
event's lock itself (as `Event.wait()` does for a moment on each call), so the
signal's handler is certain to run while the lock is held.
"""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dbless

ROOT = Path(__file__).resolve().parents[2]

STOP_SCENARIO = """
import os, signal, threading
wake = threading.Event()
asked = []

def request_stop(signum):
    asked.append(signum)
    wake.set()  # what the worker's request_stop does: its main loop waits on this event

{install}
{sigterm_under_the_lock}
print("stopped" if wake.wait(10) else "not stopped", asked, flush=True)
"""

# SIGTERM while the main thread holds `{event}`'s lock, as Event.wait() does between its steps.
SIGTERM_UNDER_THE_LOCK = """
with {event}._cond:
    os.kill(os.getpid(), signal.SIGTERM)
    sum(range(100_000))  # the handler runs here, between two bytecodes
"""


def under_the_lock(install):
    return STOP_SCENARIO.format(
        install=install, sigterm_under_the_lock=SIGTERM_UNDER_THE_LOCK.format(event="wake"))


def run_scenario(code, timeout=20, env=None):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_stop_signal_under_the_main_threads_lock_is_acted_on():
    done = run_scenario(under_the_lock(
        "from jobs.runtime.stopsignals import on_stop_signals\non_stop_signals(request_stop)"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped [15]"


def test_the_same_signal_hangs_a_handler_that_sets_the_event_itself():
    """The scenario above is the one that hung runworker: a direct handler never returns."""
    with pytest.raises(subprocess.TimeoutExpired):
        run_scenario(under_the_lock(
            "signal.signal(signal.SIGTERM, lambda signum, frame: request_stop(signum))"), timeout=3)


def test_every_signal_is_relayed_even_after_a_stop_request_fails():
    code = """
import os, signal, threading, time
from jobs.runtime.stopsignals import on_stop_signals
seen, second = [], threading.Event()

def request_stop(signum):
    seen.append(signum)
    if len(seen) == 1:
        raise RuntimeError("the first request fails")
    second.set()

on_stop_signals(request_stop)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.2)
os.kill(os.getpid(), signal.SIGINT)
print(second.wait(10), seen, flush=True)
"""
    done = run_scenario(code)
    assert done.stdout.strip() == "True [15, 2]", done.stderr
    assert "acting on signal 15 failed" in done.stderr


RUNWORKER_HANDLERS = """
import os, signal, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup()
from jobs.runtime.worker import Worker, install_signal_handlers
worker = Worker(name="signal-test")
install_signal_handlers(worker)
""" + SIGTERM_UNDER_THE_LOCK.format(event="worker.wake") + """
print(worker.stopping.wait(10), worker.hurry.is_set(), flush=True)
os.kill(os.getpid(), signal.SIGINT)
print(worker.hurry.wait(10), flush=True)
"""


def test_runworkers_handlers_stop_then_hurry_with_the_main_loop_mid_wait(tmp_path):
    env = {"SECRET_KEY": "signals", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           "HAULAGE_VAR_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = run_scenario(RUNWORKER_HANDLERS, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"], done.stderr
