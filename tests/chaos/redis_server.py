"""A Redis server of a chaos run's own, so a run may stop it, empty it and stall it.

The test session's Redis (TEST_REDIS_URL) is shared with other tests; these
faults would break them. This one listens on a free loopback port with no
persistence, so a restart is a restart with total data loss:

    server = RedisServer(binary).start()
    server.kill(); ...; server.start()     # comes back empty
    server.pause(7000)                    # CLIENT PAUSE 7000 ALL: every client waits
    server.close()
"""

import shutil
import socket
import subprocess
import time

import redis


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def binary():
    """The redis-server to run: the one tests.services used, else the one on PATH (or None)."""
    import os

    return os.environ.get("TEST_REDIS_BIN") or shutil.which("redis-server")


class RedisServer:
    def __init__(self, path, *, port=None, folder="/tmp"):
        self.path = path
        self.port = port or free_port()
        self.folder = str(folder)
        self.proc = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2,
                           socket_connect_timeout=2)

    def start(self, timeout_s=10):
        # No RUN_ENV in its environment: the run's leftover sweep must not take it for a survivor.
        self.proc = subprocess.Popen(
            [self.path, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", self.folder],
            stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with self.client() as client:
                    client.ping()
                return self
            except redis.RedisError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start within {timeout_s} s")

    def kill(self):
        """SIGKILL: no shutdown, nothing saved; every client's connection breaks."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self, milliseconds):
        """CLIENT PAUSE ALL: the server holds every client's commands for `milliseconds`."""
        with self.client() as client:
            client.execute_command("CLIENT", "PAUSE", int(milliseconds), "ALL")

    def unpause(self):
        with self.client() as client:
            client.execute_command("CLIENT", "UNPAUSE")

    def keys(self):
        with self.client() as client:
            return client.dbsize()

    def close(self):
        self.kill()
