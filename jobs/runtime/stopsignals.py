"""SIGTERM and SIGINT as stop requests, acted on outside the signal handler.

Python runs a handler in the main thread between two bytecodes, and that may
be inside `threading.Event.wait()` while the thread holds the event's lock. A
handler that sets the same event (the worker's wake-up, say), or logs through
a handler whose lock the thread holds, waits for itself for ever: the process
then ignores every later signal too, and only SIGKILL ends it. So the handler
only puts the signal on a `queue.SimpleQueue`, whose `put()` is reentrant (it
takes no lock Python code can hold), and a thread of its own makes the stop
request, where waiting for a lock is only waiting.
"""

import logging
import queue
import signal
import threading

log = logging.getLogger("jobs.stopsignals")  # its name before the move: logging configs name it

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received = queue.SimpleQueue()  # (request_stop, signum), put by the handlers
_relay = None


def on_stop_signals(request_stop):
    """Call `request_stop(signum)` for each SIGTERM or SIGINT, from a thread of its own.

    Call it from the main thread (Python sets handlers only there); a later call
    replaces the earlier one's function. The thread is a daemon, started once per
    process: it never keeps the process alive.
    """
    global _relay
    if _relay is None or not _relay.is_alive():
        _relay = threading.Thread(target=_relay_stop_requests, name="haulage-signals", daemon=True)
        _relay.start()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: _received.put((request_stop, signum)))


def _relay_stop_requests():
    while True:
        request_stop, signum = _received.get()
        try:
            request_stop(signum)
        except Exception:  # noqa: BLE001 - the next signal must still be relayed
            log.exception("acting on signal %s failed", signum)
