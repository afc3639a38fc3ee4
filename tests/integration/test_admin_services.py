"""Staff's transitions behind the admin: moves, priority tiers, bulk retry, worker commands."""

from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import services
from jobs.engine import actions
from jobs.exceptions import IllegalTransition
from jobs.models import Action, Job, JobEvent, JobStatus, Worker

pytestmark = pytest.mark.django_db

BASE = timezone.now() - timedelta(hours=1)


def ready_order(queue="default"):
    return list(Job.objects.filter(queue=queue, status=JobStatus.READY).in_claim_order()
                .values_list("pk", flat=True))


def make_queue(specs):
    """Jobs with given (priority, position, age tick, parked) — ticks collide on purpose."""
    ids = []
    for priority, position, tick, parked in specs:
        job = services.enqueue("tests.noop", {}, priority=priority)
        Job.objects.filter(pk=job.pk).update(
            position=position, enqueued_at=BASE + timedelta(seconds=tick),
            blocked_key="user:1" if parked else None,
        )
        ids.append(job.pk)
    return ids


job_specs = st.lists(
    st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(0, 3), st.booleans()),
    min_size=1, max_size=10,
)
operations = st.lists(st.tuples(st.sampled_from(["front", "up", "down"]), st.integers(0, 9)),
                      min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job_specs, operations)
def test_moves_change_exactly_the_places_they_promise(specs, ops):
    Job.objects.all().delete()
    make_queue(specs)
    for how, index in ops:
        order = ready_order()
        pk = order[index % len(order)]
        i = order.index(pk)
        expected = list(order)
        if how == "front":
            expected.insert(0, expected.pop(i))
        elif how == "up" and i > 0:
            expected[i - 1], expected[i] = expected[i], expected[i - 1]
        elif how == "down" and i < len(order) - 1:
            expected[i + 1], expected[i] = expected[i], expected[i + 1]
        moved = getattr(services, f"move_{'to_front' if how == 'front' else how}")(
            Job.objects.get(pk=pk))
        assert ready_order() == expected
        assert moved == (expected != order)


def test_a_move_is_recorded_with_who_and_why(staff_user):
    first, second = make_queue([(0, 0, 0, False), (0, 0, 1, False)])
    assert services.move_to_front(Job.objects.get(pk=second), actor=staff_user, reason="VIP")
    event = JobEvent.objects.get(job_id=second)
    assert (event.kind, event.actor, event.reason) == (Action.MOVED, staff_user, "VIP")
    assert event.data["how"] == "front" and event.data["was"] == [0, 0]
    assert ready_order() == [second, first]


def test_moving_up_into_a_higher_priority_takes_that_priority():
    urgent, normal = make_queue([(5, 0, 0, False), (0, 0, 1, False)])
    services.move_up(Job.objects.get(pk=normal))
    assert ready_order() == [normal, urgent]
    assert Job.objects.get(pk=normal).priority == 5
    assert Job.objects.get(pk=urgent).priority == 5


def test_moving_to_the_front_takes_the_queues_top_priority_and_a_smaller_position():
    ids = make_queue([(3, 4, 0, False), (3, 7, 1, False), (-1, 0, 2, False)])
    services.move_to_front(Job.objects.get(pk=ids[2]))
    job = Job.objects.get(pk=ids[2])
    assert (job.priority, job.position) == (3, 3)
    assert ready_order() == [ids[2], ids[0], ids[1]]


def test_only_queued_jobs_move(staff_user):
    (pk,) = make_queue([(0, 0, 0, False)])
    Job.objects.filter(pk=pk).update(status=JobStatus.PAUSED)
    with pytest.raises(IllegalTransition):
        services.move_up(Job.objects.get(pk=pk))
    assert not JobEvent.objects.exists()


def test_a_move_far_back_is_refused_instead_of_renumbering_the_world(monkeypatch):
    monkeypatch.setattr(actions, "MOVE_RENUMBER_MAX", 3)
    ids = make_queue([(0, 0, 0, False)] * 6)
    with pytest.raises(IllegalTransition):
        services.move_up(Job.objects.get(pk=ids[5]))
    assert ready_order() == ids
    assert services.move_to_front(Job.objects.get(pk=ids[5]))  # one write, always possible
    assert ready_order() == [ids[5], *ids[:5]]


def test_a_priority_tier_clears_the_manual_position(staff_user):
    first, second = make_queue([(0, -5, 0, False), (0, 0, 1, False)])
    services.set_priority_tier(Job.objects.get(pk=first), 0, actor=staff_user)
    assert ready_order() == [first, second]  # older, so first again by age
    row = Job.objects.get(pk=first)
    assert (row.priority, row.position) == (0, 0)
    event = row.events.get()
    assert event.kind == Action.PRIORITY and event.data == {"priority": 0, "was": 0}
    Job.objects.filter(pk=first).update(status=JobStatus.SUCCESSFUL)
    with pytest.raises(IllegalTransition):
        services.set_priority_tier(row, 10)


def test_retry_matching_retries_failed_jobs_in_batches_and_skips_the_rest(staff_user):
    failed = [services.enqueue("tests.noop", {}) for _ in range(7)]
    done = services.enqueue("tests.noop", {})
    Job.objects.filter(pk__in=[j.pk for j in failed]).update(status=JobStatus.FAILED, attempts=1)
    Job.objects.filter(pk=done.pk).update(status=JobStatus.SUCCESSFUL)
    retried, skipped = services.retry_matching(Job.objects.all(), actor=staff_user, reason="fixed",
                                               batch_size=3)
    assert (retried, skipped) == (7, 0)
    assert set(Job.objects.filter(status=JobStatus.READY).values_list("pk", flat=True)) == {
        j.pk for j in failed}
    assert Job.objects.get(pk=done.pk).status == JobStatus.SUCCESSFUL
    assert JobEvent.objects.filter(kind=Action.RETRIED, actor=staff_user,
                                   reason="fixed").count() == 7


def test_a_retry_that_collides_with_a_live_key_is_skipped():
    old = services.enqueue("tests.unique", {"key": "k"})
    Job.objects.filter(pk=old.pk).update(status=JobStatus.FAILED)
    services.enqueue("tests.unique", {"key": "k", "data": "new"})
    assert services.retry_matching(Job.objects.all()) == (0, 1)


def test_worker_commands_reach_only_live_workers():
    live = Worker.objects.create(name="w1", host="h", pid=1)
    gone = Worker.objects.create(name="w2", host="h", pid=2, stopped_at=timezone.now())
    services.command_worker(live, Worker.Command.QUIET)
    assert Worker.objects.get(pk=live.pk).command == "quiet"
    with pytest.raises(IllegalTransition):
        services.command_worker(gone, Worker.Command.STOP)
    with pytest.raises(ValueError):
        services.command_worker(live, "explode")
