"""The site of a URL: the part of its host one operator controls, for per-site limits.

"www.bbc.co.uk" and "news.bbc.co.uk" are one site, "bbc.co.uk"; "a.github.io"
and "b.github.io" are two, since the Public Suffix List says github.io hands
out names to different people. A 50-entry playlist of one site then shares
one concurrency key and one rate key ("site:<domain>"), so it does not hammer
that site, while downloads from other sites go on beside it.
"""

import functools
import ipaddress
from urllib.parse import urlsplit


@functools.cache
def _suffixes():
    # Imported once, on first use: it reads the bundled list (about 0.1 s).
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def site_of(url):
    """The registrable domain of `url`'s host ("bbc.co.uk"); an address or a bare name as it is.

    Never raises: a URL that has no host (it was validated before; a row
    edited by hand may hold anything) is the site "".
    """
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    return _suffixes().privatesuffix(host) or host
