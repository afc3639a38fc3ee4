"""Enqueue semantics, on PostgreSQL and SQLite."""

import threading
from datetime import timedelta

import pytest
from django.db import DataError, connection, transaction
from django.utils import timezone

from jobs import services
from jobs.exceptions import InvalidPayload, InvalidPriority, UnknownKind
from jobs.models import ConcurrencyLimit, Job, JobStatus

pytestmark = pytest.mark.django_db


def test_enqueue_stores_the_policy_defaults():
    job = services.enqueue("tests.echo", {"a": 1})
    job.refresh_from_db()
    assert job.status == JobStatus.READY
    assert job.queue == "default"
    assert job.max_attempts == 1
    assert job.payload == {"a": 1}
    assert job.attempts == 0


@pytest.mark.parametrize(
    "payload,match",
    [
        ({"x": float("nan")}, "NaN"),
        ({"x": float("inf")}, "NaN or infinity"),
        ({"x": "a\x00b"}, "NUL"),
        ({"a\x00": 1}, "NUL"),
        ({"x": object()}, "not JSON"),
        ({1: "x"}, "keys must be strings"),
        ({"x": "y" * 1_100_000}, "larger than"),
    ],
)
def test_bad_payloads_are_refused_and_nothing_is_written(payload, match):
    with pytest.raises(InvalidPayload, match=match):
        services.enqueue("tests.echo", payload)
    assert not Job.objects.exists()


def test_deep_nesting_is_refused():
    deep = current = {}
    for _ in range(40):
        current["x"] = {}
        current = current["x"]
    with pytest.raises(InvalidPayload, match="nested deeper"):
        services.enqueue("tests.echo", deep)
    assert not Job.objects.exists()


@pytest.mark.parametrize("priority", [101, -101, 1.5, "high", True])
def test_priority_out_of_range_is_refused(priority):
    with pytest.raises(InvalidPriority):
        services.enqueue("tests.echo", {}, priority=priority)
    assert not Job.objects.exists()


def test_unknown_kind_is_refused():
    with pytest.raises(UnknownKind, match="tests.nope"):
        services.enqueue("tests.nope", {})
    assert not Job.objects.exists()


def test_unique_key_returns_the_live_job_and_promotes_never_demotes():
    first = services.enqueue("tests.unique", {"key": "k1"}, priority=0)
    again = services.enqueue("tests.unique", {"key": "k1"}, priority=10)
    assert again.pk == first.pk
    assert Job.objects.get(pk=first.pk).priority == 10
    lower = services.enqueue("tests.unique", {"key": "k1"}, priority=-50)
    assert lower.pk == first.pk
    assert Job.objects.get(pk=first.pk).priority == 10
    assert Job.objects.count() == 1


def test_fingerprint_decides_whether_a_finished_job_runs_again():
    job = services.enqueue("tests.unique", {"key": "k2", "data": "v1"})
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCESSFUL, attempts=3)
    same = services.enqueue("tests.unique", {"key": "k2", "data": "v1"})
    assert same.pk == job.pk and same.status == JobStatus.SUCCESSFUL
    changed = services.enqueue("tests.unique", {"key": "k2", "data": "v2"})
    assert changed.pk != job.pk
    assert changed.status == JobStatus.READY and changed.attempts == 0
    assert changed.fingerprint == "v2"


def test_new_data_for_a_queued_job_updates_its_fingerprint_and_resets_its_attempts():
    job = services.enqueue("tests.unique", {"key": "k3", "data": "v1"})
    # A retry waiting out its backoff: two attempts spent on the old data.
    Job.objects.filter(pk=job.pk).update(attempts=2)
    again = services.enqueue("tests.unique", {"key": "k3", "data": "v2"})
    assert again.pk == job.pk
    assert (again.status, again.fingerprint, again.attempts) == (JobStatus.READY, "v2", 0)
    # The same data again, or none named, changes nothing.
    Job.objects.filter(pk=job.pk).update(attempts=1)
    services.enqueue("tests.unique", {"key": "k3", "data": "v2"})
    services.enqueue("tests.unique", {"key": "k3"}, fingerprint="")
    row = Job.objects.get(pk=job.pk)
    assert (row.fingerprint, row.attempts) == ("v2", 1)
    assert Job.objects.count() == 1


def test_new_data_for_a_paused_job_updates_its_fingerprint_and_keeps_its_attempts():
    job = services.enqueue("tests.unique", {"key": "k4", "data": "v1"})
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED, attempts=1)
    again = services.enqueue("tests.unique", {"key": "k4", "data": "v2"})
    assert (again.pk, again.status, again.fingerprint, again.attempts) == (
        job.pk, JobStatus.PAUSED, "v2", 1)


def test_a_running_job_keeps_its_fingerprint_so_new_data_runs_after_it():
    job = services.enqueue("tests.unique", {"key": "k5", "data": "v1"})
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempts=1)
    again = services.enqueue("tests.unique", {"key": "k5", "data": "v2"}, priority=5)
    # Its attempt read v1: it must not finish looking as if it had worked from v2.
    assert (again.pk, again.fingerprint, again.attempts, again.priority) == (job.pk, "v1", 1, 5)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCESSFUL)
    rerun = services.enqueue("tests.unique", {"key": "k5", "data": "v2"})
    assert rerun.pk != job.pk and rerun.fingerprint == "v2"


def test_supersede_cancels_ready_jobs_for_other_subjects(user):
    old = services.enqueue("tests.unique", {"key": "subject-a"}, owner=user)
    keep_running = services.enqueue("tests.unique", {"key": "subject-b"}, owner=user)
    Job.objects.filter(pk=keep_running.pk).update(status=JobStatus.RUNNING)
    new = services.enqueue("tests.unique", {"key": "subject-c"}, owner=user, supersede=True)
    assert Job.objects.get(pk=old.pk).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=old.pk).error_code == "superseded"
    assert Job.objects.get(pk=keep_running.pk).status == JobStatus.RUNNING
    assert Job.objects.get(pk=new.pk).status == JobStatus.READY


def test_enqueue_inside_a_rolled_back_transaction_leaves_nothing():
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            services.enqueue("tests.echo", {})
            raise RuntimeError("roll back")
    assert not Job.objects.exists()


# Values that a careless COPY or INSERT would mangle: its separators and
# escapes, quotes, SQL, and text beyond ASCII.
AWKWARD = "tab\tnewline\nreturn\rback\\slash \\N quote' \"dq\" ; DROP TABLE jobs_job; -- é 雪 🎞"

# Columns a bulk-enqueued job may differ in from one enqueued alone: its identity and times.
_OWN = {"id", "public_id", "enqueued_at", "run_after", "updated_at"}


def _rows(jobs):
    fields = [f.attname for f in Job._meta.concrete_fields if f.attname not in _OWN]
    return [tuple(getattr(job, name) for name in fields) for job in jobs.order_by("id")]


def test_bulk_enqueue_writes_the_rows_enqueue_writes_one_by_one(user):
    specs = [
        ("tests.noop", {"i": 1}, {}),
        ("tests.echo", {"text": AWKWARD, AWKWARD: [AWKWARD, {"n": -1.5, "t": True, "z": None}]},
         {"priority": 7, "owner": user}),
        ("tests.limited", {"keys": ["user:7", "asset:3", AWKWARD]}, {"queue": "q'\\t"}),
        ("tests.rated", {"rate_key": AWKWARD}, {"max_attempts": 4}),
        ("tests.noop", {}, {"fingerprint": AWKWARD}),
    ]
    later = timezone.now() + timedelta(hours=1)
    specs.append(("tests.noop", {"late": True}, {"run_after": later}))

    assert services.enqueue_many(specs) == len(specs)
    bulk = Job.objects.all()
    one_by_one_from = bulk.order_by("-id").first().pk
    for kind, payload, options in specs:
        services.enqueue(kind, payload, **options)
    alone = Job.objects.filter(pk__gt=one_by_one_from)

    assert _rows(bulk.filter(pk__lte=one_by_one_from)) == _rows(alone)
    assert [job.payload for job in bulk.filter(pk__lte=one_by_one_from).order_by("id")] == [
        payload for _kind, payload, _options in specs]
    assert Job.objects.get(payload__late=True, pk__lte=one_by_one_from).run_after == later
    assert len({job.public_id for job in Job.objects.all()}) == 2 * len(specs)


def test_a_built_job_is_the_one_its_model_makes_and_init_signals_are_kept(user):
    from django.db.models.signals import post_init

    job = services.build_job("tests.echo", {"a": 1}, owner=user, priority=3)
    columns = [f.attname for f in Job._meta.concrete_fields]
    made = Job(**{name: getattr(job, name) for name in columns})
    made.owner = user
    assert {name: getattr(job, name) for name in columns} == {
        name: getattr(made, name) for name in columns}
    assert (job._state.adding, job._state.db) == (made._state.adding, made._state.db)
    assert job._state.adding and job.owner == user and job.priority == 3

    seen = []
    post_init.connect(lambda sender, instance, **kw: seen.append(instance), sender=Job, weak=False,
                      dispatch_uid="test-built-job")
    try:
        listened = services.build_job("tests.echo", {"a": 2})
    finally:
        post_init.disconnect(sender=Job, dispatch_uid="test-built-job")
    assert seen == [listened]
    services.enqueue("tests.echo", {"a": 3}, owner=user)
    assert Job.objects.get(payload__a=3).owner == user


def test_bulk_enqueue_of_thousands_writes_each_once():
    specs = [("tests.noop", {"i": i}, {}) for i in range(6000)]
    assert services.enqueue_many(specs) == 6000
    assert sorted(Job.objects.values_list("payload__i", flat=True)) == list(range(6000))
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.READY}


@pytest.mark.postgres
def test_a_bulk_row_the_database_refuses_raises_djangos_error_and_writes_none_of_the_batch():
    specs = [("tests.noop", {"i": 1}, {}), ("tests.noop", {"i": 2}, {"queue": "q" * 101})]
    with pytest.raises(DataError):
        services.enqueue_many(specs)
    assert not Job.objects.exists()


def test_bulk_enqueue_refuses_unique_jobs():
    with pytest.raises(ValueError, match="unique"):
        services.enqueue_many([("tests.unique", {"key": "x"}, {})])
    assert not Job.objects.exists()


def test_concurrency_keys_get_a_limit_row_with_the_kinds_default():
    services.enqueue("tests.limited", {"keys": ["user:7", "asset:3"]})
    assert dict(ConcurrencyLimit.objects.values_list("key", "limit")) == {"user:7": 1, "asset:3": 1}


@pytest.mark.django_db(transaction=True)
def test_two_enqueuers_racing_on_one_key_end_with_one_job():
    barrier = threading.Barrier(8)
    ids, errors = [], []

    def enqueue(priority):
        try:
            barrier.wait()
            ids.append(services.enqueue("tests.unique", {"key": "race"}, priority=priority).pk)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=enqueue, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(ids)) == 1
    job = Job.objects.get()
    assert job.priority == 7  # the highest asked for wins
