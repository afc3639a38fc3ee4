"""The one place Redis clients are built.

Pinned options, because the library's defaults lose jobs: redis-py retries a
failed command, so an LPUSH whose reply was lost would enqueue twice; and its
socket timeout must stay longer than any blocking wait we issue (waits are
sliced to `BLOCK_SLICE_S`). With `REDIS_URL` unset, every client talks to one
in-process fakeredis server: the embedded local mode that `make run` uses.
"""

import threading

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
# Blocking reads wait at most this long per call: shorter than the socket
# timeout, so a quiet queue is never mistaken for a dead connection.
BLOCK_SLICE_S = 2.0

_lock = threading.Lock()
_clients = {}
_fake_server = None


def is_local_mode():
    return not settings.REDIS_URL


def build_client(url=None):
    """A new client; `url` defaults to REDIS_URL (or the local fakeredis server)."""
    global _fake_server
    url = url if url is not None else settings.REDIS_URL
    common = dict(
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        decode_responses=True,
    )
    if url:
        return redis.Redis.from_url(url, **common)
    import fakeredis

    with _lock:
        if _fake_server is None:
            _fake_server = fakeredis.FakeServer()
    return fakeredis.FakeRedis(server=_fake_server, decode_responses=True)


def get_client():
    """The process's shared client (thread-safe: redis-py pools connections)."""
    key = settings.REDIS_URL
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
