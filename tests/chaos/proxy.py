"""A small TCP proxy on loopback that misbehaves on command, for database-connection faults.

There is no netem or toxiproxy here, so the chaos runs put one of these
between each worker and PostgreSQL:

    proxy = Proxy(("127.0.0.1", 5432)).start()
    # the worker connects to 127.0.0.1:proxy.port
    proxy.drop_replies()       # the server still gets every request; the client hears nothing
    proxy.partition()          # nothing gets through either way; new connections hang
    proxy.heal(reset=True)     # close every connection that was hurt (the far side forgot it)
    proxy.heal(reset=False)    # deliver what was held, as TCP does when a partition ends
    proxy.delay(0.2)           # add latency to every chunk, both ways
    proxy.reset()              # close every connection now
    proxy.close()

One thread runs every connection through a selector. Commands from other
threads are queued to that thread, so the connections are only ever touched
by it and no locks are needed around them.
"""

import collections
import queue
import selectors
import socket
import threading
import time

PASS, DROP_REPLIES, PARTITION = "pass", "drop_replies", "partition"
CHUNK = 65536


class _Direction:
    """Bytes on their way from one socket to the other."""

    def __init__(self):
        self.pending = collections.deque()  # (due monotonic, bytes), delayed chunks
        self.held = []  # chunks a partition is holding back
        self.out = bytearray()  # due bytes the receiver has not taken yet


class _Pair:
    def __init__(self, client):
        self.client = client
        self.server = None  # None while a partition holds back the connect
        self.up = _Direction()  # client -> server
        self.down = _Direction()  # server -> client
        self.hurt = False  # lost bytes or held them: the stream cannot be trusted


class Proxy:
    def __init__(self, upstream, *, host="127.0.0.1"):
        self.upstream = upstream
        self.listener = socket.create_server((host, 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.mode = PASS
        self.delay_s = 0.0
        self.stats = collections.Counter()
        self._pairs = []
        self._selector = selectors.DefaultSelector()
        self._commands = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-proxy", daemon=True)

    def start(self):
        self._selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._thread.start()
        return self

    # --- commands (from any thread) ------------------------------------------

    def drop_replies(self):
        """Forward requests, discard replies: the server acts, the client never learns."""
        self._do(lambda: setattr(self, "mode", DROP_REPLIES))

    def partition(self):
        """Hold everything both ways, and hold new connections before they reach the server."""
        self._do(self._partition)

    def delay(self, seconds):
        self._do(lambda: setattr(self, "delay_s", float(seconds)))

    def heal(self, *, reset=True):
        """Back to passing bytes; hurt connections are closed (reset) or given what was held."""
        self._do(lambda: self._heal(reset))

    def reset(self):
        self._do(lambda: [self._close(pair) for pair in list(self._pairs)])

    def connections(self):
        return self._do(lambda: len(self._pairs))

    def close(self):
        if self._closed.is_set():
            return
        if self._thread.is_alive():
            self._do(self._shutdown)
            self._thread.join(5)
        self._closed.set()
        for sock in (self.listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _do(self, command):
        done = threading.Event()
        box = []
        self._commands.put((command, done, box))
        self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError("the proxy thread did not answer within 10 s")
        return box[0] if box else None

    # --- the loop (its own thread) -----------------------------------------------

    def _loop(self):
        while not self._closed.is_set():
            timeout = self._next_due_in()
            for key, events in self._selector.select(timeout):
                what, pair = key.data
                if what == "accept":
                    self._accept()
                elif what == "wake":
                    self._run_commands()
                elif pair in self._pairs:
                    self._service(pair, key.fileobj, events)
            self._flush_all()

    def _run_commands(self):
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                command, done, box = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                box.append(command())
            finally:
                done.set()

    def _shutdown(self):
        for pair in list(self._pairs):
            self._close(pair)
        self._closed.set()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except BlockingIOError:
                return
            client.setblocking(False)
            pair = _Pair(client)
            self._pairs.append(pair)
            self.stats["connections"] += 1
            if self.mode == PARTITION:
                pair.hurt = True  # its connect is held until the partition heals
            elif not self._connect(pair):
                continue
            self._watch(pair)

    def _connect(self, pair):
        try:
            server = socket.create_connection(self.upstream, timeout=2)
        except OSError:
            self.stats["refused"] += 1
            self._close(pair)
            return False
        server.setblocking(False)
        pair.server = server
        return True

    def _watch(self, pair):
        for sock in (pair.client, pair.server):
            if sock is None:
                continue
            events = selectors.EVENT_READ
            direction = pair.down if sock is pair.client else pair.up
            if direction.out:
                events |= selectors.EVENT_WRITE
            try:
                self._selector.modify(sock, events, ("pair", pair))
            except KeyError:
                self._selector.register(sock, events, ("pair", pair))

    def _service(self, pair, sock, events):
        if events & selectors.EVENT_READ:
            try:
                data = sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._close(pair)
                return
            if data:
                self._received(pair, data, upward=sock is pair.client)

    def _received(self, pair, data, *, upward):
        direction = pair.up if upward else pair.down
        self.stats["bytes_up" if upward else "bytes_down"] += len(data)
        if self.mode == PARTITION:
            direction.held.append(data)
            pair.hurt = True
        elif self.mode == DROP_REPLIES and not upward:
            self.stats["bytes_dropped"] += len(data)
            pair.hurt = True
        else:
            direction.pending.append((time.monotonic() + self.delay_s, data))

    def _next_due_in(self):
        dues = [d.pending[0][0] for p in self._pairs for d in (p.up, p.down) if d.pending]
        if not dues:
            return None
        return max(0.0, min(dues) - time.monotonic())

    def _flush_all(self):
        now = time.monotonic()
        for pair in list(self._pairs):
            for direction, target in ((pair.up, pair.server), (pair.down, pair.client)):
                while direction.pending and direction.pending[0][0] <= now:
                    direction.out += direction.pending.popleft()[1]
                if direction.out and target is not None:
                    try:
                        sent = target.send(direction.out)
                        del direction.out[:sent]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        self._close(pair)
                        break
            else:
                self._watch(pair)

    def _partition(self):
        self.mode = PARTITION
        for pair in self._pairs:
            pair.hurt = True  # a reset when it heals ends every connection it cut

    def _heal(self, reset):
        self.mode = PASS
        for pair in list(self._pairs):
            if not pair.hurt:
                continue
            if reset:
                self.stats["resets"] += 1
                self._close(pair)
                continue
            pair.hurt = False
            if pair.server is None and not self._connect(pair):
                continue
            now = time.monotonic()
            for direction in (pair.up, pair.down):
                direction.pending.extend((now, chunk) for chunk in direction.held)
                direction.held.clear()
            self._watch(pair)

    def _close(self, pair):
        if pair in self._pairs:
            self._pairs.remove(pair)
        for sock in (pair.client, pair.server):
            if sock is None:
                continue
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
