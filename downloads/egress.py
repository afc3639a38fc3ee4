"""The egress policy: where a download may connect, checked at connect time.

Checking the submitted URL is not enough: a redirect, a DNS answer or an HLS
segment can point inside the network. So the download process installs a
guard around `socket.socket.connect` itself: every connection the process
opens through Python sockets (TLS and every HTTP library included) is checked
against the policy *after* name resolution, and the socket connects to exactly
the address that was checked (no second lookup for a rebinding DNS server to
answer differently). Datagrams sent without connect() are not covered; a
download sends none.

Only public addresses pass, unless `DOWNLOADS_EGRESS_ALLOW` admits a specific
destination, e.g. `127.0.0.1:8000,10.0.0.0/8,[::1]:8000`: the rule of
jobs/egress.py, which the engine's own webhooks follow too.
"""

import contextlib
import ipaddress
import os
import socket
import threading

from jobs.egress import Policy, format_destination, is_public
from project.env import SettingsError

__all__ = ["EgressBlocked", "EgressPolicy", "format_destination", "install", "installed",
           "is_public", "trusted"]

SETTING = "DOWNLOADS_EGRESS_ALLOW"
INET_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class EgressBlocked(OSError):
    """A connection to a non-public address the policy does not admit; an OSError so that
    network libraries treat it like any failed connect and let it propagate."""

    def __init__(self, host, port):
        self.host = host
        self.port = port
        super().__init__(f"Connection to {format_destination(host, port)} is not allowed "
                         f"(not a public address; see {SETTING}).")


class EgressPolicy(Policy):
    """The engine's rule (jobs/egress.py: public addresses, plus the allowed destinations),
    read from DOWNLOADS_EGRESS_ALLOW."""

    @classmethod
    def from_setting(cls, raw):
        """Parse `ip[/prefix][:port]` entries separated by commas (IPv6 in brackets with a port)."""
        try:
            return cls.parse(raw or "")
        except ValueError as exc:
            raise SettingsError(f"{SETTING} entry {exc}") from None

    @classmethod
    def from_env(cls, environ=None):
        return cls.from_setting((os.environ if environ is None else environ).get(SETTING, ""))

    @classmethod
    def from_conf(cls):
        """The policy in force: Django settings, else the environment (see downloads.conf)."""
        from downloads import conf

        return cls.from_setting(conf.egress_allow())

    def check(self, ip, port):
        """Raise EgressBlocked unless a connection to ip:port is permitted."""
        if not self.permits(ip, port):
            raise EgressBlocked(str(ip), port)


# --- The guard --------------------------------------------------------------

class Guard:
    """An installed policy; uninstall() (or leaving the `with` block) removes it.

    `blocked` lists the destinations refused while it was installed, so a
    caller can tell a blocked connection from an ordinary failure however the
    library wrapped the error.
    """

    def __init__(self, policy):
        self.policy = policy
        self.blocked = []

    def uninstall(self):
        _remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.uninstall()


# One lock for the guard list and the patching, so two threads installing or
# removing guards at once patch socket.socket exactly once and never leave it half-restored.
_lock = threading.Lock()
_trusted = threading.local()  # .depth > 0 while this thread runs trusted() code
_guards = []  # installed guards; a connection must pass every one of them
_saved = {}  # what socket.socket itself defined before the guard replaced it
# The methods the guard calls once a connection passed: whatever socket.socket
# resolved to before patching (usually the C methods of _socket.socket).
_original = {"connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex}


def install(policy):
    """Check every connection this process opens against `policy` until the guard is removed.

    Guards nest: with several installed, a connection must pass all of them.
    """
    guard = Guard(policy)
    with _lock:
        if not _guards:
            _patch()
        _guards.append(guard)
    return guard


@contextlib.contextmanager
def trusted():
    """Let this thread's connections skip the check inside the block.

    For the caller's own plumbing while a download is guarded (a progress
    write that reconnects to Redis or the database), never for anything a
    URL points at. Other threads stay guarded.
    """
    _trusted.depth = getattr(_trusted, "depth", 0) + 1
    try:
        yield
    finally:
        _trusted.depth -= 1


def installed():
    with _lock:
        return list(_guards)


def _remove(guard):
    with _lock:
        if guard in _guards:
            _guards.remove(guard)
            if not _guards:
                _unpatch()


def _patch():
    for name, guarded in (("connect", _guarded_connect), ("connect_ex", _guarded_connect_ex)):
        _saved[name] = socket.socket.__dict__.get(name)
        _original[name] = getattr(socket.socket, name)
        setattr(socket.socket, name, guarded)


def _unpatch():
    for name, original in _saved.items():
        if original is None:
            delattr(socket.socket, name)  # back to the inherited C method
        else:
            setattr(socket.socket, name, original)
    _saved.clear()


def _guarded_connect(sock, address):
    return _original["connect"](sock, _checked(sock, address))


def _guarded_connect_ex(sock, address):
    return _original["connect_ex"](sock, _checked(sock, address))


def _checked(sock, address):
    """The address to connect to, resolved and checked; raises EgressBlocked."""
    if sock.family not in INET_FAMILIES or not isinstance(address, tuple):
        return address  # Unix sockets, socket pairs and other local plumbing
    if getattr(_trusted, "depth", 0):
        return address
    host, port, *rest = address
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0] if isinstance(host, str) else host)
    except ValueError:
        # A name: resolve it here and connect to the checked result, so the
        # kernel never resolves it a second time behind the policy's back.
        info = socket.getaddrinfo(host, port, sock.family, sock.type)
        resolved = info[0][4]
        host, ip = resolved[0], ipaddress.ip_address(resolved[0].split("%", 1)[0])
        rest = list(resolved[2:])
    with _lock:
        guards = list(_guards)
    refused = [guard for guard in guards if not guard.policy.permits(ip, port)]
    if refused:
        destination = format_destination(ip, port)
        for guard in guards:
            guard.blocked.append(destination)
        raise EgressBlocked(str(ip), port)
    return (host, port, *rest)
