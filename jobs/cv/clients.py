"""The one place Redis clients are built.

Pinned options, because the library's defaults lose jobs: redis-py retries a
failed command, so an LPUSH whose reply was lost would enqueue twice; and its
socket timeout must stay longer than any blocking wait we issue (waits are
sliced to `BLOCK_SLICE_S`). With `REDIS_URL` unset, every client talks to one
in-process fakeredis server: the embedded local mode that `make run` uses.
"""

import threading

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobs import conf

SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
# Blocking reads wait at most this long per call: shorter than the socket
# timeout, so a quiet queue is never mistaken for a dead connection.
BLOCK_SLICE_S = 2.0

_lock = threading.Lock()
_clients = {}
_fake_server = None


def is_local_mode():
    return not conf.REDIS_URL


def build_client(url=None, *, decode_responses=True, timeout_s=None):
    """A new client; `url` defaults to REDIS_URL (or the local fakeredis server).

    `decode_responses=False` gives bytes back: the CV worker reads queue items
    that way, so a message that is not UTF-8 can still be dead-lettered and
    removed by its exact value instead of failing inside the client.
    `timeout_s` shortens both socket timeouts (reads and writes, and the
    connect) to at most that: every call, whatever the network does, then
    fails within it instead of hanging (a connection that a middlebox keeps
    open but passes nothing through included).
    """
    global _fake_server
    url = url if url is not None else conf.REDIS_URL
    limit_s = timeout_s if timeout_s is not None else SOCKET_TIMEOUT_S
    common = dict(
        socket_timeout=min(SOCKET_TIMEOUT_S, limit_s),
        socket_connect_timeout=min(CONNECT_TIMEOUT_S, limit_s),
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        decode_responses=decode_responses,
    )
    if url:
        return redis.Redis.from_url(url, **common)
    import fakeredis

    with _lock:
        if _fake_server is None:
            server = fakeredis.FakeServer()
            # Made now, under the lock: fakeredis makes a database on its first connection,
            # unguarded, so threads connecting at once (a runworker's monitor and its
            # embedded CV worker) could each get their own and never see each other's jobs.
            server.dbs[0]  # noqa: B018 - the lookup creates it
            _fake_server = server
    return fakeredis.FakeRedis(server=_fake_server, decode_responses=decode_responses)


def block_slice_s(client):
    """How long one blocking read on `client` may wait: `BLOCK_SLICE_S`, or less
    when the client was built with a shorter socket timeout (at most half of it,
    so the server's empty reply always arrives before the client gives up)."""
    timeout_s = client.connection_pool.connection_kwargs.get("socket_timeout")
    if not timeout_s:
        return BLOCK_SLICE_S
    return max(0.05, min(BLOCK_SLICE_S, timeout_s / 2))


def is_fake(client):
    """True for the in-process fakeredis of local mode."""
    return type(client).__module__.startswith("fakeredis")


def get_client():
    """The process's shared client (thread-safe: redis-py pools connections)."""
    key = conf.REDIS_URL
    if key not in _clients:
        _clients.setdefault(key, build_client())
    return _clients[key]


def ping():
    """None when Redis answers (or local mode is in use), else what went wrong."""
    if is_local_mode():
        return None
    try:
        get_client().ping()
    except redis.RedisError as exc:
        return f"redis unreachable: {exc.__class__.__name__}"
    return None
