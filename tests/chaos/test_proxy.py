"""The fault proxy against a real echo server on loopback (no database)."""

import socket
import threading
import time

import pytest

from tests.chaos.proxy import Proxy

pytestmark = pytest.mark.dbless


@pytest.fixture
def echo():
    """A server that answers every chunk in capitals and remembers what it was sent."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)  # so the acceptor sees `stop` promptly
    stop = threading.Event()
    received = []
    handlers = []

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            handler = threading.Thread(target=answer, args=(conn,), daemon=True)
            handlers.append((conn, handler))
            handler.start()

    def answer(conn):
        with conn:
            try:
                while data := conn.recv(1024):
                    received.append(data)
                    conn.sendall(data.upper())
            except OSError:
                pass

    acceptor = threading.Thread(target=serve, daemon=True)
    acceptor.start()
    yield server.getsockname(), received
    stop.set()
    acceptor.join(5)
    server.close()
    for _conn, handler in handlers:
        handler.join(5)


@pytest.fixture
def proxy(echo):
    address, _ = echo
    proxy = Proxy(address).start()
    clients = []

    def connect():
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5)
        clients.append(client)
        return client

    proxy.connect = connect
    yield proxy
    for client in clients:
        client.close()
    proxy.close()


def ask(client, data):
    client.sendall(data)
    return client.recv(1024)


def closed(client):
    """Whether the proxy ended this connection (an EOF, or a reset when bytes were unread)."""
    try:
        return client.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_it_passes_bytes_both_ways(proxy):
    assert ask(proxy.connect(), b"hello") == b"HELLO"


def test_dropped_replies_reach_the_server_but_not_the_client_until_a_reset(proxy, echo):
    _, received = echo
    client = proxy.connect()
    proxy.drop_replies()
    with pytest.raises(TimeoutError):
        ask(client, b"commit")
    assert b"commit" in received  # the server acted on it
    proxy.heal(reset=True)
    assert closed(client)  # the hurt connection is ended, not resumed
    assert ask(proxy.connect(), b"again") == b"AGAIN"


def test_a_partition_holds_everything_then_delivers_it_when_healed_without_reset(proxy, echo):
    _, received = echo
    client = proxy.connect()
    ask(client, b"before")
    proxy.partition()
    client.sendall(b"during")
    late = proxy.connect()  # a connection opened during the partition hangs too
    late.sendall(b"new")
    with pytest.raises(TimeoutError):
        client.recv(1024)
    assert b"during" not in received
    proxy.heal(reset=False)
    assert client.recv(1024) == b"DURING"
    assert late.recv(1024) == b"NEW"


def test_a_partition_healed_with_a_reset_closes_the_connections_it_held(proxy):
    client = proxy.connect()
    proxy.partition()
    client.sendall(b"lost")
    proxy.heal(reset=True)
    assert closed(client)


def test_delay_adds_latency_each_way(proxy):
    client = proxy.connect()
    client.settimeout(5)
    proxy.delay(0.2)
    began = time.monotonic()
    assert ask(client, b"slow") == b"SLOW"
    assert time.monotonic() - began >= 0.4


def test_reset_closes_every_connection(proxy):
    clients = [proxy.connect() for _ in range(3)]
    for client in clients:
        ask(client, b"x")
    assert proxy.connections() == 3
    proxy.reset()
    assert all(closed(client) for client in clients)
    assert proxy.connections() == 0
