"""Where outgoing connections may go, and the engine's own guarded HTTP POST.

The rule: only public addresses, unless an allow list admits a destination
(`ip[/prefix][:port]` entries, e.g. `127.0.0.1:8000,10.0.0.0/8,[::1]:8000`).
Downloads apply it to every connection of a download process
(downloads/egress.py); the engine applies it to its failure webhooks
(`post_json`), whose URL and every address it resolves to is checked when
connecting, the socket connecting to exactly the address checked (no second
lookup for a rebinding DNS server to answer differently).

`post_json` follows no redirect (a 3xx is an answer like any other, reported),
and one deadline bounds the whole delivery: connecting, sending, and the
answer however slowly it trickles in.
"""

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

# Prefixes that embed an IPv4 address a gateway will forward to: judge the embedded one.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
ANSWER_BYTES = 65536  # what is read of an answer's body


def is_public(ip):
    """True when `ip` is a globally routable unicast address (IPv6 wrappers of IPv4 unwrapped)."""
    ip = ipaddress.ip_address(ip)
    if ip.version == 6:
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
        if ip.is_site_local:
            return False
    return ip.is_global and not (
        ip.is_multicast or ip.is_loopback or ip.is_link_local or ip.is_private
        or ip.is_reserved or ip.is_unspecified
    )


def format_destination(host, port):
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


@dataclass(frozen=True)
class Allowed:
    """One allow-list entry: a network and, optionally, one port."""

    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    port: int | None = None

    def admits(self, ip, port):
        if self.port is not None and port != self.port:
            return False
        if ip.version != self.network.version:
            mapped = getattr(ip, "ipv4_mapped", None)
            return mapped is not None and mapped in self.network
        return ip in self.network

    def __str__(self):
        network = self.network
        net = str(network) if network.num_addresses > 1 else str(network.network_address)
        if self.port is None:
            return net
        return f"[{net}]:{self.port}" if self.network.version == 6 else f"{net}:{self.port}"


class Policy:
    """Public addresses, plus the destinations in `allowed`."""

    def __init__(self, allowed=()):
        self.allowed = tuple(allowed)

    @classmethod
    def parse(cls, raw):
        """A policy from entries: a list, or one string of them separated by commas.
        ValueError names the first entry that is not an address."""
        items = raw.split(",") if isinstance(raw, str) else list(raw or ())
        return cls(parse_entry(str(item).strip()) for item in items if str(item).strip())

    def permits(self, ip, port):
        ip = ipaddress.ip_address(ip)
        if is_public(ip):
            return True
        return any(entry.admits(ip, port) for entry in self.allowed)

    def __repr__(self):
        return f"{type(self).__name__}(allowed={', '.join(map(str, self.allowed)) or 'public only'})"


def parse_entry(entry):
    """`ip[/prefix][:port]` (IPv6 in brackets when a port follows) as an Allowed; ValueError else."""
    port = None
    try:
        if entry.startswith("["):
            address, _, rest = entry[1:].partition("]")
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(entry)
                port = _port(rest[1:])
        elif entry.count(":") == 1:
            address, _, port_text = entry.partition(":")
            port = _port(port_text)
        else:
            address = entry
        network = ipaddress.ip_network(address, strict=False)
    except ValueError:
        raise ValueError(f"{entry!r} is not an address; use ip[/prefix][:port], "
                         "e.g. 127.0.0.1:8000, 10.0.0.0/8 or [::1]:8000.") from None
    return Allowed(network, port)


def _port(text):
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError(text)
    return port


# --- The engine's guarded POST -------------------------------------------------------


class DeliveryError(Exception):
    """A POST that did not deliver; the message says why, in words for a job's error."""


class Blocked(DeliveryError):
    """The URL's host is, or resolves to, an address the policy does not admit."""


class Redirected(DeliveryError):
    """The server answered with a redirect, which is not followed."""

    def __init__(self, status, location):
        self.status, self.location = status, location
        super().__init__(f"HTTP {status}, a redirect to {location or '(nowhere)'}, not followed")


class Refused(DeliveryError):
    """The server answered with an error status."""

    def __init__(self, status):
        self.status = status
        super().__init__(f"HTTP {status}")


class TimedOut(DeliveryError):
    """The deadline passed before the whole answer came."""


class Unreachable(DeliveryError):
    """No connection, or it broke off."""


def post_json(url, body, *, policy, deadline_s, headers=None):
    """POST `body` (bytes of JSON) to the http(s) `url` within `deadline_s` seconds, connecting
    only where `policy` permits; returns the status of a 2xx answer, raises DeliveryError else."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise Unreachable(f"{url!r} has no valid port") from None
    cutter = _Cutter(deadline_s)
    connection = _Connection(parts.hostname, port, tls=parts.scheme == "https", policy=policy,
                             cutter=cutter)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("POST", path, body=body,
                           headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        response.read(ANSWER_BYTES)  # an answer cut short reads as one that ended
        if cutter.passed:
            raise TimedOut(cutter.words)
    except Blocked:
        raise
    except (DeliveryError, OSError, http.client.HTTPException, ValueError) as exc:
        if cutter.passed:  # whatever broke, it broke for the deadline
            raise TimedOut(cutter.words) from None
        if isinstance(exc, DeliveryError):
            raise
        raise Unreachable(str(exc) or type(exc).__name__) from None
    finally:
        cutter.stop()
        connection.close()
    if 300 <= response.status < 400:
        raise Redirected(response.status, response.getheader("Location", ""))
    if not 200 <= response.status < 300:
        raise Refused(response.status)
    return response.status


class _Connection(http.client.HTTPConnection):
    """http.client's connection, to checked addresses only (TLS for https), watched by a cutter."""

    def __init__(self, host, port, *, tls, policy, cutter):
        self.default_port = 443 if tls else 80
        super().__init__(host, port or self.default_port)
        self.tls, self.policy, self.cutter = tls, policy, cutter

    def connect(self):
        sock = _connect_checked(self.host, self.port, self.policy, self.cutter)
        if self.tls:
            try:
                # The handshake once the TLS socket is watched: a slow one is cut like the rest.
                sock = ssl.create_default_context().wrap_socket(
                    sock, server_hostname=self.host, do_handshake_on_connect=False)
                self.cutter.watch(sock)
                sock.do_handshake()
            except BaseException:
                sock.close()
                raise
        self.sock = sock


def _connect_checked(host, port, policy, cutter):
    """A socket connected to an address `host` resolves to that `policy` permits."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Unreachable(f"{host}: {exc}") from None
    permitted = [info for info in found if policy.permits(info[4][0].split("%", 1)[0], port)]
    if not permitted:
        refused = ", ".join(sorted({format_destination(info[4][0], port) for info in found}))
        raise Blocked(f"{refused} is not a public address, nor one the allow list admits")
    error = None
    for family, kind, proto, _name, peer in permitted:
        sock = socket.socket(family, kind, proto)
        try:
            cutter.watch(sock)
            sock.connect(peer)  # the address checked, not the name
        except BaseException as exc:
            sock.close()
            if not isinstance(exc, OSError):
                raise
            error = exc
        else:
            return sock
    raise Unreachable(str(error))


class _Cutter:
    """Shuts the socket a delivery waits on when its deadline passes, whatever call waits:
    a server that trickles its answer a byte at a time never lets a read time out."""

    def __init__(self, seconds):
        self.words = f"no whole answer within {seconds:g} s"
        self.deadline = time.monotonic() + seconds
        self.over = False
        self._sock = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    @property
    def passed(self):
        return self.over or time.monotonic() >= self.deadline

    def watch(self, sock):
        """Shut `sock` at the deadline, and let no call on it wait past it; TimedOut if passed."""
        with self._lock:
            remaining = self.deadline - time.monotonic()
            if self.over or remaining <= 0:
                self.over = True
                raise TimedOut(self.words)
            self._sock = sock
        sock.settimeout(remaining)

    def _cut(self):
        with self._lock:
            self.over = True
            if self._sock is not None:
                try:
                    # The plain socket's shutdown, also under TLS: the reader sees the end.
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        """Done: the timer touches no socket from now on (closed, its number may be reused)."""
        with self._lock:
            self._timer.cancel()
            self._sock = None
