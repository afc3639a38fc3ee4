"""The payload filter at its edges, on both databases: a path too deep is a clear error wherever a
filter is read (the admin list, retry and cancel of all matching, `manage.py jobs`), never a 500;
an integer-looking key is an object key, never a list index; a value matches only its JSON type."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from jobs import services
from jobs.models import Job, JobStatus
from jobs.selectors.filters import MAX_PAYLOAD_KEYS, JobFilter

pytestmark = pytest.mark.django_db

DEEP = ".".join(["a"] * 187) + "=1"
SAID = f"at most {MAX_PAYLOAD_KEYS} keys"


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def shapes():
    """Payloads alike but for the shape of "items", and for the JSON type of "flag"."""
    made = {
        "object": services.enqueue("tests.noop", {"items": {"0": "x", "1": {"id": 7}}, "flag": True}),
        "list": services.enqueue("tests.noop", {"items": ["x", {"id": 7}], "flag": 1}),
        "text": services.enqueue("tests.noop", {"items": {"0": "y"}, "flag": "true"}),
    }
    Job.objects.filter(pk__in=[job.pk for job in made.values()]).update(status=JobStatus.FAILED)
    return {name: job.pk for name, job in made.items()}


def listed(client, **params):
    response = client.get(reverse("admin:jobs_job_changelist"), params)
    assert response.status_code == 200, response.content[:2000]
    body = response.content.decode()
    return {int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', body)}, body


def test_a_path_too_deep_is_said_in_the_admin_list(staff, shapes):
    found, body = listed(staff, payload=DEEP)
    assert SAID in body and "187" in body
    assert found == set()  # an unread filter never widens to every job


@pytest.mark.parametrize("view", ["admin:jobs_job_retry_failed", "admin:jobs_job_cancel_matching"])
def test_a_path_too_deep_matches_nothing_in_retry_and_cancel_of_all_matching(staff, shapes, view):
    url = f"{reverse(view)}?payload={DEEP}"
    response = staff.get(url)
    assert response.status_code == 200
    body = response.content.decode()
    assert SAID in body and 'data-count="0"' in body
    assert staff.post(url, {"reason": "", "count": "3", "up_to": str(max(shapes.values()))}
                      ).status_code in (200, 302)
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 3  # nothing retried


@pytest.mark.parametrize("action", ["retry", "cancel"])
def test_a_path_too_deep_is_a_command_error(shapes, action):
    with pytest.raises(CommandError, match=SAID):
        call_command("jobs", action, "--payload", DEEP, stdout=StringIO())


def test_the_deepest_path_allowed_still_reads():
    path = ".".join(f"k{i}" for i in range(MAX_PAYLOAD_KEYS))
    nested = "leaf"
    for i in reversed(range(MAX_PAYLOAD_KEYS)):
        nested = {f"k{i}": nested}
    job = services.enqueue("tests.noop", nested)
    assert list(JobFilter.parse(payload=f"{path}=leaf").apply(Job.objects.all())) == [job]


@pytest.mark.parametrize(("payload", "expected"), [
    ("items.0=x", {"object"}),  # the key "0", not the first element of the list
    ("items.1.id=7", {"object"}),
    ("items.0=y", {"text"}),
    ("flag=true", {"object", "text"}),  # JSON true and the text "true", never the number 1...
    ("flag=1", {"list"}),  # ...which is not true
    ('flag="true"', {"text"}),
])
def test_keys_and_types_mean_the_same_on_both_databases(shapes, payload, expected):
    matching = JobFilter.parse(payload=payload).apply(Job.objects.all())
    assert set(matching.values_list("pk", flat=True)) == {shapes[name] for name in expected}


def test_a_key_with_a_double_quote_is_said(staff, shapes):
    found, body = listed(staff, payload='a"b=1')
    assert "double quote" in body and found == set()
