"""Checking and normalising the URLs users submit for download.

URLs come from users and end up as arguments of yt-dlp, so anything that is
not a plain http(s) address of a named or public host is refused with a
message for the form field. This is the first gate only: where connections
really go is checked at connect time (downloads.egress).
"""

import ipaddress
import re
import socket
import unicodedata
from urllib.parse import unquote, urlsplit, urlunsplit

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from downloads import conf
from downloads.egress import EgressPolicy

SCHEMES = {"http": 80, "https": 443}
# yt-dlp reads "ytsearch5:cats", "scsearch:..." and "ytsearchdate:..." as searches, not URLs.
SEARCH_PREFIX = re.compile(r"^[a-z0-9_-]*search[a-z0-9_-]*:", re.IGNORECASE)
HOST_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$")
IPV4_LOOSE = re.compile(r"^[0-9a-fx.]+$")  # what inet_aton reads: 127.1, 0x7f.0.0.1, 2130706433
# A host whose last label is a number is an IPv4 address or nothing (as browsers read it).
NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class InvalidURL(ValidationError):
    """A submitted URL that will not be downloaded; the message is for the form field."""


def validate_url(raw, *, policy=None, max_length=None):
    """Return the normalised form of `raw`, or raise InvalidURL saying what is wrong."""
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidURL(_("Enter the address of a video."), code="required")
    url = raw.strip()
    max_length = conf.max_url_length() if max_length is None else max_length
    if len(url) > max_length:
        raise InvalidURL(
            _("This address is too long (%(length)d characters; at most %(max)d)."),
            code="too_long", params={"length": len(url), "max": max_length},
        )
    if any(_is_space_or_control(char) for char in url):
        raise InvalidURL(_("The address contains spaces or control characters."), code="whitespace")
    if url.startswith("-"):
        raise InvalidURL(_("Enter an address starting with http:// or https://."), code="option")
    if SEARCH_PREFIX.match(url):
        raise InvalidURL(_("Searches are not supported; enter the address of a video."),
                         code="search")
    try:
        unquote(url, errors="strict")
    except UnicodeDecodeError:
        raise InvalidURL(_("The address holds percent-escapes that are not UTF-8 text."),
                         code="encoding") from None
    parts = _split(url)
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidURL(_("Only http:// and https:// addresses can be downloaded."), code="scheme")
    if "@" in parts.netloc:
        raise InvalidURL(_("Addresses with a user name or password are not accepted."),
                         code="credentials")
    host, port = _host_and_port(parts)
    _check_destination(host, port or SCHEMES[parts.scheme.lower()],
                       EgressPolicy.from_conf() if policy is None else policy)
    return normalise_url(url)


def normalise_url(url):
    """The form two submissions of the same address share (for de-duplication).

    Lower-case scheme and host, no default port, no fragment, "/" for an empty
    path; the path and the query (order included) are kept as they are. A host
    written as an IP literal is written the one way (127.1, 0177.0.0.1, 0x7f.1
    and [::ffff:127.0.0.1] are all 127.0.0.1), as the connection will see it.
    """
    parts = _split(url.strip())
    scheme = parts.scheme.lower()
    host, port = _host_and_port(parts)
    ip = _literal_ip(host)
    if ip is not None:
        host = str(ip.ipv4_mapped or ip) if ip.version == 6 else str(ip)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != SCHEMES.get(scheme):
        netloc = f"{netloc}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def _split(url):
    try:
        return urlsplit(url)
    except ValueError:  # e.g. an unclosed "[" around an IPv6 host
        raise InvalidURL(_("The host name in this address is not valid."), code="host") from None


def _is_space_or_control(char):
    return char.isspace() or unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp", "Zs"}


def _host_and_port(parts):
    try:
        port = parts.port
    except ValueError:
        raise InvalidURL(_("The port number in this address is not valid."), code="host") from None
    raw_host = parts.hostname or ""
    if not raw_host:
        raise InvalidURL(_("The address has no host name."), code="host")
    if ":" in raw_host:  # an IPv6 literal
        try:
            return str(ipaddress.IPv6Address(raw_host.split("%", 1)[0])), port
        except ValueError:
            raise InvalidURL(_("The host name in this address is not valid."),
                             code="host") from None
    # Digits other than 0-9 (circled, superscript, other scripts' digits) turn into
    # ASCII ones or into punycode: either way not what the address seems to say.
    if any(not char.isascii() and unicodedata.category(char) in {"Nd", "Nl", "No"}
           for char in raw_host):
        raise InvalidURL(_("The host name in this address is not valid."), code="host")
    try:
        host = raw_host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise InvalidURL(_("The host name in this address is not valid."), code="host") from None
    if not HOST_NAME.match(host):
        raise InvalidURL(_("The host name in this address is not valid."), code="host")
    if NUMERIC_LABEL.match(host.rstrip(".").rsplit(".", 1)[-1]) and _literal_ip(host) is None:
        raise InvalidURL(_("The host name in this address is not valid."), code="host")
    return host, port


def _literal_ip(host):
    """The address a host written as an IP literal stands for (in any form inet_aton reads)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if IPV4_LOOSE.match(host.rstrip(".")):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host.rstrip(".")))
        except OSError:
            return None
    return None


def _check_destination(host, port, policy):
    name = host.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        addresses = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    else:
        ip = _literal_ip(host)
        addresses = [] if ip is None else [ip]
    if addresses and not any(policy.permits(ip, port) for ip in addresses):
        raise InvalidURL(
            _("Addresses on private or local networks cannot be downloaded."), code="private",
        )
