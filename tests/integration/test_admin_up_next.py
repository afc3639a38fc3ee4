"""The admin's "up next" page lists a mixed queue in exactly the order workers claim it."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import services
from jobs.engine import claiming
from jobs.models import Job, Worker

pytestmark = pytest.mark.django_db

KINDS = ["tests.noop", "tests.echo", "tests.limited"]
BASE = timezone.now() - timedelta(hours=1)

mixed_jobs = st.lists(
    st.fixed_dictionaries({
        "kind": st.sampled_from(KINDS),
        "priority": st.integers(-3, 3),
        "position": st.integers(-2, 2),
        "tick": st.integers(0, 3),  # equal enqueue times: the id breaks the tie
        "owned": st.booleans(),
    }),
    min_size=1, max_size=14,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mixed_jobs)
def test_up_next_is_the_claim_order_of_a_mixed_queue(client, staff_user, specs):
    Job.objects.all().delete()
    client.force_login(staff_user)
    worker = Worker.objects.create(name="p", host="h", pid=1, kinds=KINDS)
    for spec in specs:
        options = {"priority": spec["priority"], "owner": staff_user if spec["owned"] else None}
        payload = {"keys": [f"user:{staff_user.pk}"]} if spec["kind"] == "tests.limited" else {}
        # A limit wide enough never to bite: per-key parking is the selectors' concern.
        job = services.enqueue(spec["kind"], payload, limits={f"user:{staff_user.pk}": 100},
                               **options)
        Job.objects.filter(pk=job.pk).update(position=spec["position"],
                                             enqueued_at=BASE + timedelta(seconds=spec["tick"]))
    body = client.get(reverse("admin:jobs_job_up_next"), {"queue": "default"}).content.decode()
    rows = [(int(n), int(pk)) for pk, n in re.findall(r'data-job="(\d+)" data-number="(\d+)"', body)]
    claimed = []
    while batch := claiming.claim(worker, queues=["default"], kinds=KINDS, limit=1):
        claimed.extend(job.pk for job in batch)
    assert rows == list(enumerate(claimed, start=1))
    assert len(claimed) == len(specs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(-2, 2), st.integers(-1, 1), st.integers(0, 2), st.booleans()),
                min_size=1, max_size=12))
def test_parked_jobs_are_listed_at_their_place_in_the_shared_order(client, staff_user, specs):
    """Claimable and parked jobs are read apart (each from its index) and merged by the claim's key."""
    Job.objects.all().delete()
    client.force_login(staff_user)
    for priority, position, tick, parked in specs:
        job = services.enqueue("tests.noop", {}, priority=priority)
        Job.objects.filter(pk=job.pk).update(position=position, blocked_key="user:1" if parked else None,
                                             enqueued_at=BASE + timedelta(seconds=tick))
    body = client.get(reverse("admin:jobs_job_up_next"), {"queue": "default"}).content.decode()
    shown = [int(pk) for pk in re.findall(r'data-job="(\d+)" data-number', body)]
    assert shown == list(Job.objects.filter(queue="default", status="READY").in_claim_order()
                         .values_list("pk", flat=True))
