"""A download's site: the registrable domain of its URL's host, by the Public Suffix List."""

import pytest

from downloads.sites import site_of

pytestmark = pytest.mark.dbless


@pytest.mark.parametrize(("url", "site"), [
    ("https://www.bbc.co.uk/iplayer/x", "bbc.co.uk"),
    ("https://news.bbc.co.uk/", "bbc.co.uk"),
    ("https://www.YouTube.com/watch?v=1", "youtube.com"),
    ("https://a.github.io/v.mp4", "a.github.io"),  # github.io hands out names: two sites
    ("https://b.github.io/v.mp4", "b.github.io"),
    ("http://127.0.0.1:8000/c0.mp4", "127.0.0.1"),  # an address is its own site
    ("http://[::1]:8000/c0.mp4", "::1"),
    ("http://localhost/x", "localhost"),
    ("https://example.com./x", "example.com"),
    ("not a url", ""),
    ("http://[::1/x", ""),
])
def test_the_site_of_a_url(url, site):
    assert site_of(url) == site
