"""Every route the resolver knows, fed hostile input by every kind of visitor.

For each URL pattern (a new endpoint is picked up by itself) Hypothesis sends
generated paths, methods, query strings, headers and bodies (JSON, and the
page's own form fields, staff's admin forms included) as an anonymous
visitor, a user, a user who owns nothing and staff. Whatever it sends:

- nothing answers 5xx (an exception in a view fails the test with its traceback);
- a refusal under /api/ is the API's JSON error document;
- a refused request (4xx) has written no row.
"""

import itertools
import json
from urllib.parse import quote

import pytest
from django.urls import NoReverseMatch, reverse
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import strategies
from tests.fuzz.harness import FUZZ, STATS, form_fields, row_counts
from tests.fuzz.routes import routes

pytestmark = [pytest.mark.fuzz, pytest.mark.usefixtures("media_root")]

ROUTES = routes()
ACTORS = ["anonymous", "user", "nobody", "staff"]
METHODS = ["GET", "GET", "POST", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]
REAL_PATHS_MAX = 12


def real_paths(route, world):
    """Paths of this route that name the world's own objects, so requests reach past the 404."""
    if not route.name:
        return []
    if not route.groups:
        try:
            return [reverse(route.name)]
        except NoReverseMatch:
            return []
    found = []
    for values in itertools.product(world.ids, repeat=len(route.groups)):
        try:
            found.append(reverse(route.name, kwargs=dict(zip(route.groups, values, strict=True))))
        except NoReverseMatch:
            continue
        if len(found) >= REAL_PATHS_MAX:
            break
    return found


def generated_paths(route):
    # Percent-encoded, so the path reaches the server exactly as generated
    # (a lone surrogate becomes bytes that are not UTF-8).
    return st.from_regex(route.regex, fullmatch=True).map(
        lambda path: "/" + quote(path, safe="/", errors="surrogatepass"))


HOSTILE_SEGMENTS = ["%ff", "%2e%2e", "%ed%a0%80", "²", "①", "٣", "9" * 25, "9" * 5000, "-1", "0",
                    "1e308", "..", "%00"]


@st.composite
def spoiled_paths(draw, reals):
    """A real path with one of its segments swapped for a hostile one (sent as it is)."""
    segments = draw(st.sampled_from(reals)).split("/")
    at = draw(st.integers(1, max(1, len(segments) - 2)))
    segments[at] = draw(st.sampled_from(HOSTILE_SEGMENTS))
    return "/".join(segments)


def page_fields(staff_client, paths):
    """The fields of every form staff see on these paths (with their filled-in values)."""
    fields = {}
    for path in paths[:2]:
        response = staff_client.get(path)
        if response.status_code == 200 and "html" in response.get("Content-Type", ""):
            fields.update(form_fields(response.content.decode()))
    return fields


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_no_request_reaches_a_5xx_or_writes_when_refused(route, world, actors):
    reals = real_paths(route, world)
    fields = page_fields(actors("staff"), reals)
    paths = generated_paths(route)
    if reals:
        paths = st.one_of(st.sampled_from(reals), spoiled_paths(reals), paths)
    names = set(fields) | set(strategies.FIELDS)

    @FUZZ
    @given(data=st.data())
    def fuzz(data):
        STATS["examples"] += 1
        who = data.draw(st.sampled_from(ACTORS), label="actor")
        client = actors(who)
        path = data.draw(paths, label="path")
        query = data.draw(strategies.query_strings(), label="query")
        method = data.draw(st.sampled_from(METHODS), label="method")
        headers = data.draw(strategies.headers, label="headers")
        if data.draw(st.booleans(), label="with a real token"):
            headers["HTTP_AUTHORIZATION"] = "Bearer " + data.draw(
                st.sampled_from([world.staff_token, world.user_token]))
        kwargs = {}
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            if data.draw(st.booleans(), label="json body"):
                kwargs = {"data": data.draw(strategies.json_bodies(), label="body"),
                          "content_type": "application/json"}
            else:
                form = {name: value for name, value in fields.items() if value is not None}
                form.update(data.draw(strategies.form_data(names), label="form"))
                kwargs = {"data": form}
                if method != "POST":  # the test client sends these bodies as they are
                    kwargs = {"data": json.dumps(form), "content_type": "application/x-www-form-urlencoded"}
        url = f"{path}?{query}" if query else path
        before = row_counts()
        response = client.generic(method, url, **kwargs, **headers) if method != "POST" else \
            client.post(url, **kwargs, **headers)
        STATS["requests"] += 1
        STATS[f"status {response.status_code // 100}xx"] += 1
        if response.streaming:  # read to the end, which closes the file it holds
            b"".join(response.streaming_content)
        assert response.status_code < 500, (who, method, url, response.status_code)
        if response.status_code >= 400:
            if path.startswith("/api/") and method != "HEAD":
                body = response.json()
                assert isinstance(body.get("error"), str) and body.get("error_code"), body
            assert row_counts() == before, (who, method, url, response.status_code)

    fuzz()
