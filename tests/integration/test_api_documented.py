"""docs/api.md is the API's contract: every route, every field of every document and every error
code it names is what the code answers, and nothing the code answers is missing from it.

The documents are read from the API itself (a finished download with measured shots, its summary
and a shot's notes asked for), so a field added to a view without a line in the guide fails here.
"""

import re
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from downloads.models import Shot
from downloads.urls import ACTIONS
from insights import conf
from jobs import services as jobs
from tests.integration.test_downloads_pages import ready  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("media_root")

ROOT = Path(settings.BASE_DIR)
GUIDE = ROOT / "docs" / "api.md"
SOURCES = ["core", "downloads", "insights"]  # the apps that answer under /api/


def guide():
    return GUIDE.read_text(encoding="utf-8")


def documented_fields(title):
    """The names in the first column of the table under `### title` (`a`, `b` | … gives both)."""
    section = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^#|\Z)", guide(), re.S | re.M).group(1)
    names = set()
    for row in re.findall(r"^\| (.+?) \|", section, re.M):
        if set(row) <= {"-", " "} or row == "field":
            continue
        names |= set(re.findall(r"`([\w.]+)`", row))
    return names


def documented_object(name):
    """The keys of an object the guide spells inline: A **cv job** is `{"status", …}`."""
    spelled = re.search(rf"\*\*{name}\*\* is `\{{(.*?)\}}`", guide(), re.S).group(1)
    return set(re.findall(r'"(\w+)"', spelled))


def keys(document, nested=()):
    """Top-level keys, with those of `nested` objects as "parent.key" instead of "parent"."""
    found = set()
    for key, value in document.items():
        if key in nested:
            found |= {f"{key}.{inner}" for inner in value}
        else:
            found.add(key)
    return found


@pytest.fixture
def measured(ready):  # noqa: F811
    """The finished download's asset split into two shots, the second measured."""
    Shot.objects.bulk_create([
        Shot(asset=ready.asset, index=0, start_s=0.0, end_s=1.0, thumbnail="cv/1/0.jpg"),
        Shot(asset=ready.asset, index=1, start_s=1.0, end_s=2.0, thumbnail="cv/1/1.jpg",
             analysis={"brightness": 0.4, "motion": [[0, 0.1]], "motion_mean": 0.1,
                       "colors": [{"hex": "#2f6fdb", "share": 1.0}], "duration_s": 1.0,
                       "keyframe_strip": "cv/1/1-strip.jpg"}),
    ])
    return ready


def test_every_field_of_every_document_is_in_the_guide_and_nothing_more(alice_client, measured,
                                                                         settings):
    settings.INSIGHTS_GATEWAY_URL = ""
    jobs.set_queue(conf.QUEUE, concurrency=1, gap_seconds=0)
    download = alice_client.get(f"/api/downloads/{measured.pk}/").json()
    assert keys(download, nested=("asset",)) == documented_fields("download")
    assert set(download["summary"]) == documented_fields("insight link")

    request = download["summary"]["request"]
    insight = alice_client.post(request["url"], request["body"], content_type="application/json")
    assert set(insight.json()) == documented_fields("insight")

    listed = alice_client.get(download["asset"]["shots_url"]).json()
    assert set(listed) == {"segment", "shots"}
    shot = listed["shots"][1]
    assert set(shot) == documented_fields("shot")
    # A script fetches what the document links without knowing the site's address.
    for url in (shot["thumbnail_url"], shot["analysis"]["keyframe_strip_url"],
                download["asset"]["file_url"], download["page_url"]):
        assert url.startswith("http://testserver/"), url

    queue = alice_client.get("/api/queue/").json()
    assert set(queue) == {"jobs", "queues"}
    assert set(queue["jobs"][0]) == documented_fields("queue entry")
    assert set(queue["queues"][0]) == documented_object("setting")

    segment = alice_client.post(f"/api/downloads/{measured.pk}/segment/").json()["segment"]
    assert set(segment) == documented_object("cv job")


def api_routes(patterns=None, prefix=""):
    """Every route under /api/ as Django spells it (api/downloads/<str:download_id>/shots/)."""
    found = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern).lstrip("^").rstrip("$")
        if isinstance(pattern, URLResolver):
            found += api_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and route.startswith("api/"):
            found.append(route)
    return found


def test_every_api_route_is_in_the_guides_table_of_endpoints():
    endpoints = re.search(r"^## Endpoints\n(.*?)(?=^## )", guide(), re.S | re.M).group(1)
    paths = set(re.findall(r"`[A-Z]+ (/api/\S*?)`", endpoints))
    routes = api_routes()
    assert len(routes) > 5
    for route in routes:
        if "(?P<name>" in route:
            # The four download actions share one route; the guide lists them on one line.
            line = next(row for row in endpoints.splitlines() if "/api/downloads/<id>/pause/" in row)
            for name in ACTIONS.split("|"):
                assert f"{name}/`" in line, f"the action {name} is not in docs/api.md"
            continue
        written = "/" + re.sub(r"<(?:\w+:)?\w+>", "<id>", route)
        assert written in paths, f"{written} is not in docs/api.md's table of endpoints"


@pytest.mark.dbless
def test_the_worked_example_reaches_only_routes_the_api_has():
    example = re.search(r"^## A worked example.*?^```\n(.*?)^```", guide(), re.S | re.M).group(1)
    # Ids are written short ("5b0c…"); any id of the right shape stands in for them.
    addresses = {re.sub(r"\w+…", str(uuid.uuid4()), path) for path in
                 re.findall(r"http://127\.0\.0\.1:8000(/[^\s\"]*)", example)}
    routes = {resolve(path).route for path in addresses}
    assert all(route.startswith("api/") for route in routes), routes
    # The file is fetched with the token, whole and a range, from the address the document gives.
    commands = re.findall(r"^\$ (curl .*)$", example.replace("\\\n", " "), re.M)
    fetches = [command for command in commands if command.endswith("/file/")]
    assert fetches and all('-H "$H"' in command for command in fetches)
    assert any("-H 'Range: bytes=" in command for command in fetches)
    assert "api/downloads/<str:download_id>/file/" in routes
    assert re.search(r'"file_url": "http\S+/file/"', example)


def test_every_error_code_the_api_answers_is_in_the_guide():
    table = re.search(r"^## Errors\n(.*?)(?=^## )", guide(), re.S | re.M).group(1)
    documented = set(re.findall(r"^\| \d{3} \| `(\w+)` \|", table, re.M))
    answered = {"unauthorized"}  # core/tokens.py spells it in its own response
    for source in SOURCES:
        for path in (ROOT / source).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            answered |= set(re.findall(r'\berror\(\d{3}, "(\w+)"', text))
            if path.name == "jsonapi.py":  # the 400s a body's parser raises
                answered |= set(re.findall(r'code="(\w+)"', text))
    assert answered - documented == set()
    assert documented - answered == set()
