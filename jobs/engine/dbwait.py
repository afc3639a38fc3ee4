"""Waiting for PostgreSQL's reply to the engine's statements: look at the socket for a
moment before sleeping.

A statement on loopback or a nearby server is answered in tens of
microseconds, but a process that sleeps in poll() until then also pays for
waking its CPU: an idle virtual CPU is halted and the hypervisor wakes it,
some 50 us a round trip on the 2-core machines the benchmarks run on, more
than PostgreSQL's work for an enqueue's INSERT (docs/performance.md, tenth
round). So each wait of a statement made inside `spinning()` first asks the
socket, without sleeping, for up to JOBS_DB_SPIN_MICROSECONDS, then sleeps as
psycopg would. The engine marks enqueue and bulk enqueue with it.

Only those statements spin: everything else the process runs on the same
connections (the host project's queries, the admin's, the engine's other work)
waits exactly as psycopg does, its wait handed straight to psycopg's. A statement
that spins costs at most JOBS_DB_SPIN_MICROSECONDS of CPU per wait. A connection
whose replies keep coming later than that (a server across a network) stops
spinning for a while and tries again later, so it does not pay it for nothing.
0 turns spinning off. `runworker` turns it off for its own process
(`stop_spinning`): its threads, and often PostgreSQL itself, share the
machine's cores, a thread spinning there takes them from the others, and the
workers' figures gained nothing from it (docs/performance.md).

psycopg funnels every wait of a connection (statements, commits, pipelines,
COPY) through `Connection.wait(generator)`; the generator yields what it waits
for and is sent what is ready. Each new PostgreSQL connection gets a `wait` of
its own that, inside `spinning()`, wraps that generator and answers it itself
while the socket is ready during the spin; outside, it costs one context-variable
read.
"""

import functools
import select
import weakref
from contextvars import ContextVar
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

# Whether the current thread or task is inside `spinning()`. A context variable, so one
# thread's or task's engine work never makes another's statements spin (a new thread
# starts outside).
_inside = ContextVar("jobs_dbwait_inside", default=False)


def spinning(func=None):
    """Mark the engine's own statements as the ones that spin.

    `with spinning():` for a block; `@spinning` (or `@spinning()`) on a function, for each
    of its calls. Nests: leaving an inner one leaves the outer one's statements spinning.
    """
    if func is None:
        return _Spinning()

    @functools.wraps(func)
    def spun(*args, **kwargs):
        token = _inside.set(True)
        try:
            return func(*args, **kwargs)
        finally:
            _inside.reset(token)

    return spun


class _Spinning:
    """One `with spinning():` (each `spinning()` call makes a new one), or a decorator."""

    __slots__ = ("_token",)

    def __enter__(self):
        self._token = _inside.set(True)

    def __exit__(self, *exc_info):
        _inside.reset(self._token)

    def __call__(self, func):
        return spinning(func)


@receiver(connection_created)
def _spin_on_new_connections(sender, connection, **kwargs):
    if _spinning and connection.vendor == "postgresql":
        install(connection.connection, conf.JOBS_DB_SPIN_MICROSECONDS)


def stop_spinning():
    """This process's connections wait without spinning from now on, inside `spinning()`
    too, this thread's open ones included (call it before starting threads)."""
    global _spinning
    _spinning = False
    for db in connections.all(initialized_only=True):
        if db.vendor == "postgresql" and db.connection is not None:
            vars(db.connection).pop("wait", None)


def install(conn, spin_us):
    """Make psycopg's connection `conn` spin for up to `spin_us` microseconds before each
    sleep of a statement made inside `spinning()`."""
    if spin_us <= 0 or not _CAN_POLL:
        return
    spinner = _Spinner(spin_us / 1e6)
    class_wait = type(conn).wait
    ref = weakref.ref(conn)  # the connection holds this function: no cycle through it

    def wait(gen, *args, **kwargs):
        conn = ref()
        if _inside.get():
            gen = spinner.wrap(gen, conn.pgconn.socket)
        return class_wait(conn, gen, *args, **kwargs)

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
