"""Finding jobs in the admin list by owner, kind, queue, state, error code, dates, unique key and
a payload field, on both databases; "all matching" retry and cancel; bad values said, never a 500."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobStatus
from jobs.selectors.filters import FilterError, JobFilter, parse_payload

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:jobs_job_changelist")
RETRY_MATCHING = reverse("admin:jobs_job_retry_failed")
CANCEL_MATCHING = reverse("admin:jobs_job_cancel_matching")


@pytest.fixture
def staff(client, staff_user):
    client.force_login(staff_user)
    return client


def listed(client, **params):
    response = client.get(CHANGELIST, params)
    assert response.status_code == 200, response.content[:2000]
    body = response.content.decode()
    return {int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', body)}, body


@pytest.fixture
def jobs(user, other_user):
    day = timezone.now() - timedelta(days=3)
    made = {
        "video": services.enqueue("tests.noop", {"video": {"id": 42, "title": "Cats"}, "url": "https://a.example/x"},
                                  owner=user),
        "text_id": services.enqueue("tests.noop", {"video": {"id": "42"}}, owner=other_user),
        "other": services.enqueue("tests.echo", {"video": {"id": 7}, "flag": True}, owner=user,
                                  unique_key="report:7"),
        "old": services.enqueue("tests.other_queue", {"n": 1}),
    }
    Job.objects.filter(pk=made["old"].pk).update(enqueued_at=day)
    Job.objects.filter(pk=made["text_id"].pk).update(status=JobStatus.FAILED, error_code="network",
                                                     finished_at=timezone.now())
    Job.objects.filter(pk=made["other"].pk).update(status=JobStatus.FAILED, error_code="bad_input",
                                                   finished_at=timezone.now())
    return {name: job.pk for name, job in made.items()}


@pytest.mark.parametrize(("params", "expected"), [
    ({"owner": "ALICE"}, {"video", "other"}),
    ({"kind": "tests.echo"}, {"other"}),
    ({"queue": "other"}, {"old"}),
    ({"status__exact": "FAILED"}, {"text_id", "other"}),
    ({"error_code": "network"}, {"text_id"}),
    ({"unique_key": "report:7"}, {"other"}),
    ({"payload": "video.id=42"}, {"video", "text_id"}),  # the number and the text
    ({"payload": 'video.id="42"'}, {"text_id"}),  # quoted: the text only
    ({"payload": "url=https://a.example/x"}, {"video"}),
    ({"payload": "flag=true"}, {"other"}),
    ({"payload": "video.title=Cats", "owner": "alice"}, {"video"}),
    ({"payload": "missing=1"}, set()),
    ({"since": (timezone.localdate() - timedelta(days=4)).isoformat(),
      "until": (timezone.localdate() - timedelta(days=2)).isoformat()}, {"old"}),
    ({"since": timezone.localdate().isoformat()}, {"video", "text_id", "other"}),
    # A bare date as the end of a range is that whole day.
    ({"since": timezone.localdate().isoformat(), "until": timezone.localdate().isoformat()},
     {"video", "text_id", "other"}),
])
def test_each_filter_narrows_the_list(staff, jobs, params, expected):
    found, _body = listed(staff, **params)
    assert found == {jobs[name] for name in expected}


@pytest.mark.parametrize(("params", "said"), [
    ({"since": "2024-13-45"}, "is not a date"),
    ({"until": "9999-12-31"}, ""),  # the last day there is: nothing past it, nothing wrong
    ({"payload": "no equals sign"}, "key=value"),
    ({"payload": "=5"}, "key=value"),
    ({"payload": "a..b=5"}, "key=value"),
    ({"payload": 'list=[1, 2]'}, "not a list or an object"),
    ({"owner": "x" * 300}, "longer than"),
])
def test_a_value_that_cannot_be_read_is_said_and_matches_nothing(staff, jobs, params, said):
    found, body = listed(staff, **params)
    if said:
        assert said in body.replace("&#x27;", "'")
        assert found == set()  # never every job: "all matching" must not widen


def test_a_nul_in_a_filter_is_refused_as_a_bad_request(staff, jobs):
    assert staff.get(CHANGELIST, {"payload": "a=\x00"}).status_code == 400


def confirmation(staff, url, **fields):
    """The confirmation page's body and what its form posts (the count it names, the last id)."""
    body = staff.get(url).content.decode()
    hidden = dict(re.findall(r'<input type="hidden" name="(count|up_to)" value="(\d+)">', body))
    return body, {**hidden, **fields}


def test_retry_all_matching_names_the_count_and_retries_only_those(staff, jobs):
    url = f"{RETRY_MATCHING}?payload=video.id%3D42"
    body, form = confirmation(staff, url, reason="the network is back")
    assert 'data-count="1"' in body and "1 failed job matches" in body
    response = staff.post(url, form)
    assert response.status_code == 302
    assert Job.objects.get(pk=jobs["text_id"]).status == JobStatus.READY
    assert Job.objects.get(pk=jobs["other"]).status == JobStatus.FAILED


def test_cancel_all_matching_goes_past_the_page(staff, jobs):
    more = services.enqueue_many([("tests.noop", {"batch": i}, {}) for i in range(150)])
    assert more == 150
    url = f"{CANCEL_MATCHING}?kind=tests.noop"
    body, form = confirmation(staff, url, reason="stop the flood")
    assert 'data-count="151"' in body and "All 151 queued, running or paused jobs" in body
    staff.post(url, form)
    assert Job.objects.filter(kind="tests.noop", status=JobStatus.CANCELLED).count() == 151
    assert Job.objects.get(pk=jobs["text_id"]).status == JobStatus.FAILED  # not live: left alone
    assert Job.objects.get(pk=jobs["other"]).status == JobStatus.FAILED


def test_all_matching_never_does_more_than_the_confirmation_named(staff, jobs):
    services.enqueue_many([("tests.noop", {"batch": i}, {}) for i in range(3)])
    url = f"{CANCEL_MATCHING}?kind=tests.noop"
    body, form = confirmation(staff, url, reason="")
    assert 'data-count="4"' in body
    later = services.enqueue("tests.noop", {"batch": "later"})  # queued after the count was shown
    staff.post(url, form)
    assert Job.objects.filter(kind="tests.noop", status=JobStatus.CANCELLED).count() == 4
    assert Job.objects.get(pk=later.pk).status == JobStatus.READY

    # An older job that came to match meanwhile: nothing is done, the page asks again.
    cancelled = list(Job.objects.filter(kind="tests.noop", status=JobStatus.CANCELLED).order_by("pk"))
    Job.objects.filter(pk__in=[job.pk for job in cancelled[1:]]).update(status=JobStatus.FAILED)
    url = f"{RETRY_MATCHING}?kind=tests.noop"
    body, form = confirmation(staff, url, reason="")
    assert 'data-count="4"' in body  # three of them, and the fixture's failed one
    Job.objects.filter(pk=cancelled[0].pk).update(status=JobStatus.FAILED)
    answer = staff.post(url, form)
    assert answer.status_code == 200 and "changed since the count was shown" in answer.content.decode()
    assert 'data-count="5"' in answer.content.decode()
    assert Job.objects.filter(kind="tests.noop", status=JobStatus.FAILED).count() == 5


def test_a_bad_filter_makes_all_matching_match_nothing(staff, jobs):
    url = f"{CANCEL_MATCHING}?since=yesterday"
    body = staff.get(url).content.decode()
    assert 'data-count="0"' in body
    staff.post(url, {"reason": ""})
    assert not Job.objects.filter(status=JobStatus.CANCELLED).exists()


def test_the_filter_form_keeps_the_other_filters(staff, jobs):
    _found, body = listed(staff, kind="tests.noop", owner="alice")
    form = body.split('id="job-filters"', 1)[1].split("</form>", 1)[0]
    assert 'name="kind" value="tests.noop"' in form and 'value="alice"' in form


def test_payload_values_read_as_text_and_as_json():
    assert parse_payload("a.b=42") == (("a", "b"), ["42", 42])
    assert parse_payload('a="42"') == (("a",), ["42"])
    assert parse_payload("a=NaN") == (("a",), ["NaN"])
    assert parse_payload("url=https://x/?q=1") == (("url",), ["https://x/?q=1"])
    with pytest.raises(FilterError):
        parse_payload("a={}")
    with pytest.raises(FilterError):
        JobFilter.parse(status="finished-ish")
    assert JobFilter.parse(status="failed,Queued").statuses == (JobStatus.FAILED, JobStatus.READY)


@pytest.mark.postgres
def test_the_payload_filter_uses_the_gin_index_on_postgresql(jobs):
    query = JobFilter.parse(payload="video.id=42").apply(Job.objects.all())
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: make the planner show its hand
        sql, params = query.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "jobs_job_payload_gin" in plan, plan
