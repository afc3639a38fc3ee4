"""Waiting for PostgreSQL's reply: look at the socket for a moment before sleeping.

A statement on loopback or a nearby server is answered in tens of
microseconds, but a process that sleeps in poll() until then also pays for
waking its CPU: an idle virtual CPU is halted and the hypervisor wakes it,
some 50 us a round trip on the 2-core machines the benchmarks run on, more
than PostgreSQL's work for an enqueue's INSERT (docs/performance.md, tenth
round). So each wait of a connection first asks the socket, without sleeping,
for up to JOBS_DB_SPIN_MICROSECONDS, then sleeps as psycopg would.

That costs at most the spin's length of CPU per wait. A connection whose
replies keep coming later than that (a server across a network) stops
spinning for a while and tries again later, so it does not pay it for
nothing. 0 turns spinning off. `runworker` turns it off for its own process:
its threads, and often PostgreSQL itself, share the machine's cores, a
thread spinning there takes them from the others, and the workers' figures
gained nothing from it (docs/performance.md).

psycopg funnels every wait of a connection (statements, commits, pipelines,
COPY) through `Connection.wait(generator)`; the generator yields what it waits
for and is sent what is ready. This module wraps that generator and answers
it itself while the socket is ready during the spin.
"""

import select
import weakref
from time import perf_counter

from django.db import connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver
from psycopg.waiting import READY_R, READY_W, WAIT_R, WAIT_RW, WAIT_W

from jobs import conf

# No poll() where gevent has patched select (its waits must go through its loop) or on
# Windows: such a process waits as psycopg does.
_CAN_POLL = hasattr(select, "poll")
_EVENTS = {WAIT_R: select.POLLIN, WAIT_W: select.POLLOUT,
           WAIT_RW: select.POLLIN | select.POLLOUT} if _CAN_POLL else {}

MISSES_BEFORE_REST = 8  # operations in a row whose reply came after the spin...
REST_OPERATIONS = 1000  # ...make the connection wait without spinning for this many


_spinning = True  # whether this process's new connections spin (stop_spinning)


@receiver(connection_created)
def _spin_on_new_connections(sender, connection, **kwargs):
    if _spinning and connection.vendor == "postgresql":
        install(connection.connection, conf.JOBS_DB_SPIN_MICROSECONDS)


def stop_spinning():
    """This process's connections wait without spinning from now on, this thread's open
    ones included (call it before starting threads)."""
    global _spinning
    _spinning = False
    for db in connections.all(initialized_only=True):
        if db.vendor == "postgresql" and db.connection is not None:
            vars(db.connection).pop("wait", None)


def install(conn, spin_us):
    """Make psycopg's connection `conn` spin for up to `spin_us` microseconds before each sleep."""
    if spin_us <= 0 or not _CAN_POLL:
        return
    spinner = _Spinner(spin_us / 1e6)
    class_wait = type(conn).wait
    ref = weakref.ref(conn)  # the connection holds this function: no cycle through it

    def wait(gen, *args, **kwargs):
        conn = ref()
        return class_wait(conn, spinner.wrap(gen, conn.pgconn.socket), *args, **kwargs)

    wait.spinner = spinner
    conn.wait = wait


class _Spinner:
    """One connection's spin: its length, and whether its replies have lately come within it."""

    def __init__(self, spin_s):
        self.spin_s = spin_s
        self.misses = 0  # operations in a row whose reply came after the spin
        self.resting = 0  # operations left that wait without spinning

    def wrap(self, gen, fileno):
        """What psycopg's waiting is to run for `gen`, one operation of psycopg's (a
        statement, a commit...): `gen` itself while the connection rests."""
        if self.resting:
            self.resting -= 1
            return gen
        return self.answer(gen, fileno)

    def answer(self, gen, fileno):
        """`gen`, with every wait the socket answers during a spin answered here; once one
        is not, the operation's waits are psycopg's own."""
        poller = select.poll()
        spinning = True
        try:
            state = next(gen)
            while True:
                ready = self._spin(poller, fileno, state) if spinning else 0
                if not ready:
                    spinning = False
                    ready = yield state
                state = gen.send(ready)
        except StopIteration as stop:
            self._note(missed=not spinning)
            return stop.value

    def _spin(self, poller, fileno, state):
        """What is ready on the socket within the spin (0: nothing, or only an error or a
        hang-up, which psycopg's waiting reports)."""
        poller.register(fileno, _EVENTS[state])
        until = perf_counter() + self.spin_s
        while True:
            events = poller.poll(0)
            if events:
                flags = events[0][1]
                return (READY_R if flags & select.POLLIN else 0) | (
                    READY_W if flags & select.POLLOUT else 0)
            if perf_counter() >= until:
                return 0

    def _note(self, *, missed):
        if not missed:
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= MISSES_BEFORE_REST:
            self.misses, self.resting = 0, REST_OPERATIONS
