import ipaddress
import socket
import tempfile
from contextlib import closing
from pathlib import Path

import pytest

from downloads import egress
from downloads.egress import EgressBlocked, EgressPolicy, is_public
from project.env import SettingsError


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.255.0.9", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.0.1",
        "169.254.169.254", "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3", "224.0.0.1",
        "239.255.255.250", "240.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.2.1",
        "::", "::1", "fe80::1", "fc00::1", "fd12:3456::1", "fec0::1", "ff02::1", "ff0e::1",
        "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
        "2002:7f00:1::1",  # 6to4 wrapping 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 wrapping 10.0.0.1
        "2001:db8::1", "::127.0.0.1",
    ],
)
def test_non_public_addresses_are_not_public(address):
    assert not is_public(address)
    assert not EgressPolicy().permits(address, 443)


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2001:4860:4860::8888", "::ffff:8.8.8.8",
     "64:ff9b::808:808", "2002:808:808::1"],
)
def test_public_addresses_pass(address):
    assert is_public(address)
    assert EgressPolicy().permits(address, 443)


@pytest.mark.parametrize(
    ("raw", "allowed", "refused"),
    [
        ("127.0.0.1:8000", [("127.0.0.1", 8000)], [("127.0.0.1", 8001), ("127.0.0.2", 8000)]),
        ("10.0.0.0/8", [("10.9.8.7", 1), ("10.0.0.1", 65535)], [("172.16.0.1", 80)]),
        ("10.0.0.0/8:443", [("10.2.2.2", 443)], [("10.2.2.2", 80)]),
        ("[::1]:8000", [("::1", 8000)], [("::1", 8001), ("127.0.0.1", 8000)]),
        ("::1", [("::1", 1)], [("::2", 1)]),
        ("fd00::/8", [("fd00::5", 80)], [("fe80::1", 80)]),
        ("[fd00::/8]:9000", [("fd00::5", 9000)], [("fd00::5", 80)]),
        (" 127.0.0.1:1 , 192.168.0.0/16 ", [("127.0.0.1", 1), ("192.168.3.3", 5)],
         [("127.0.0.1", 2)]),
        ("127.0.0.1", [("::ffff:127.0.0.1", 80)], [("::1", 80)]),
        ("", [], [("127.0.0.1", 80)]),
    ],
)
def test_allow_list_admits_exactly_its_entries(raw, allowed, refused):
    policy = EgressPolicy.from_setting(raw)
    for ip, port in allowed:
        assert policy.permits(ip, port), (ip, port)
    for ip, port in refused:
        assert not policy.permits(ip, port), (ip, port)
        with pytest.raises(EgressBlocked, match=str(port)):
            policy.check(ip, port)


@pytest.mark.parametrize("raw", ["localhost", "127.0.0.1:http", "300.1.1.1", "10.0.0.0/33",
                                 "[::1]8000", "127.0.0.1:0", "127.0.0.1:70000", "::1:8000x"])
def test_malformed_allow_entry_names_the_setting(raw):
    with pytest.raises(SettingsError, match="DOWNLOADS_EGRESS_ALLOW"):
        EgressPolicy.from_setting(raw)


def test_policy_from_env(monkeypatch):
    monkeypatch.setenv("DOWNLOADS_EGRESS_ALLOW", "127.0.0.1:9")
    assert EgressPolicy.from_env().permits("127.0.0.1", 9)
    assert EgressPolicy.from_conf().permits("127.0.0.1", 9)
    monkeypatch.delenv("DOWNLOADS_EGRESS_ALLOW")
    assert not EgressPolicy.from_env().permits("127.0.0.1", 9)


# --- The guard on real sockets ----------------------------------------------

class Listener:
    """A TCP listener on loopback that reports whether anyone connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.3)
        self.port = self.sock.getsockname()[1]

    def accepted(self):
        try:
            conn, _ = self.sock.accept()
        except TimeoutError:
            return False
        conn.close()
        return True


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.sock.close()


def test_guard_blocks_a_connection_before_it_reaches_the_server(listener):
    port = listener.port
    with egress.install(EgressPolicy()) as guard:
        with pytest.raises(EgressBlocked, match=f"127.0.0.1:{port}"):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        with closing(socket.socket()) as sock, pytest.raises(EgressBlocked):
            sock.connect_ex(("127.0.0.1", port))
    assert guard.blocked == [f"127.0.0.1:{port}", f"127.0.0.1:{port}"]
    assert not listener.accepted()


def test_guard_admits_an_allowed_destination_and_is_removed_on_exit(listener):
    port = listener.port
    with egress.install(EgressPolicy.from_setting(f"127.0.0.1:{port}")) as guard:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert listener.accepted()
    assert guard.blocked == []
    assert "connect" not in socket.socket.__dict__  # back to the plain socket methods
    assert egress.installed() == []
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert listener.accepted()


def test_guard_checks_names_after_resolution(listener, monkeypatch):
    """A public-looking name that resolves to loopback (DNS rebinding) is refused."""
    port = listener.port
    real_getaddrinfo = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):
        if host in ("rebind.example", "allowed.example"):
            host = "127.0.0.1"
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with egress.install(EgressPolicy()):
        with pytest.raises(EgressBlocked):
            socket.create_connection(("rebind.example", port), timeout=2)
        with closing(socket.socket()) as sock, pytest.raises(EgressBlocked):
            sock.connect(("localhost", port))  # a name handed straight to connect()
    assert not listener.accepted()
    # The socket connects to the address that was checked: the kernel cannot
    # resolve "allowed.example" itself, so this only works through the guard.
    with egress.install(EgressPolicy.from_setting(f"127.0.0.1:{port}")):
        with closing(socket.socket()) as sock:
            sock.connect(("allowed.example", port))
    assert listener.accepted()


def test_ipv4_mapped_ipv6_is_judged_as_ipv4(listener):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 sockets here")
    port = listener.port
    with egress.install(EgressPolicy()), closing(socket.socket(socket.AF_INET6)) as sock:
        with pytest.raises(EgressBlocked, match="127.0.0.1"):
            sock.connect(("::ffff:127.0.0.1", port))
    assert not listener.accepted()


def test_guards_nest_and_every_one_must_admit(listener):
    port = listener.port
    outer = egress.install(EgressPolicy())
    try:
        with egress.install(EgressPolicy.from_setting(f"127.0.0.1:{port}")) as inner:
            with pytest.raises(EgressBlocked):
                socket.create_connection(("127.0.0.1", port), timeout=2)
        assert inner.blocked and outer.blocked
        assert egress.installed() == [outer]
        with pytest.raises(EgressBlocked):
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        outer.uninstall()
    assert egress.installed() == []
    socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_trusted_code_passes_in_its_own_thread_only(listener):
    import threading

    outcome = {}

    def other_thread():
        try:
            socket.create_connection(("127.0.0.1", listener.port), timeout=2).close()
        except EgressBlocked as exc:
            outcome["blocked"] = exc

    with egress.install(EgressPolicy()) as guard:
        with egress.trusted():
            socket.create_connection(("127.0.0.1", listener.port), timeout=2).close()
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
        with pytest.raises(EgressBlocked):
            socket.create_connection(("127.0.0.1", listener.port), timeout=2)
    assert "blocked" in outcome
    assert len(guard.blocked) == 2
    assert listener.accepted()


def test_unix_sockets_and_socket_pairs_are_untouched():
    with egress.install(EgressPolicy()) as guard:
        left, right = socket.socketpair()
        with left, right:
            left.sendall(b"x")
            assert right.recv(1) == b"x"
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "s")
            with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client, \
                    socket.socket(socket.AF_UNIX) as other:
                server.bind(path)
                server.listen(2)
                client.connect(path)
                assert other.connect_ex(path) == 0
    assert guard.blocked == []


def test_blocked_is_an_oserror_naming_the_destination():
    error = EgressBlocked("fd00::1", 443)
    assert isinstance(error, OSError)
    assert "[fd00::1]:443" in str(error)
    assert ipaddress.ip_address(error.host) == ipaddress.ip_address("fd00::1")
