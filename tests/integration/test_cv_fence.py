"""A CV worker cut off from Redis stops its jobs before anyone else may start them.

The worker under test (`manage.py runcvworker`) reaches Redis through the
chaos proxy; a second one talks to Redis directly. The proxy black-holes the
first (its connections stay open, no byte passes either way) while it runs a
long job; once its heartbeat lapses, the second worker's reaper returns the
job and the second worker runs it to the end. The handler (`stint` in
tests/cv_handlers.py) writes its begin, ticks and end with one clock for every
process on the machine, so the ledger tells whether two runs ever overlapped.
"""

import json
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from jobs.cv import clients
from jobs.cv.transport import Admission, CVConfig, State, Transport, new_status, parse_message
from jobs.cv.worker import FENCE_EXIT_CODE, fence_margin_s, redis_timeout_s
from tests.acceptance.test_cvworker_processes import WorkerProcess, heartbeat, wait_ready
from tests.chaos.proxy import Proxy
from tests.cv_handlers import clock
from tests.waiting import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.dbless]

TTL_S = 3.0
INTERVAL_S = 0.5
# Far longer than the cut-off run may last once Redis is gone (less than the
# TTL), however late the test gets to cut it off: without the fence it would
# still run when the replacement starts. The replacement's run is short.
JOB_S = 60.0
AGAIN_S = 2.0
TIMINGS = {"CV_HEARTBEAT_TTL_S": str(TTL_S), "CV_HEARTBEAT_INTERVAL_S": str(INTERVAL_S)}


@pytest.fixture
def channel(redis_url):
    config = CVConfig(prefix=f"fence{uuid.uuid4().hex[:8]}", heartbeat_ttl_s=TTL_S,
                      heartbeat_interval_s=INTERVAL_S)
    client = clients.build_client(redis_url)
    yield Transport(client, config=config)
    keys = list(client.scan_iter(f"{config.prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def proxy(redis_url):
    address = urlsplit(redis_url)
    proxy = Proxy((address.hostname, address.port)).start()
    yield proxy
    proxy.close()


@pytest.fixture
def fleet(channel, tmp_path):
    """Starts `runcvworker` processes on the test's prefix; kills those still running after it."""
    started = []

    def start(name, url, types):
        worker = WorkerProcess(url=url, prefix=channel.prefix, folder=tmp_path, name=name,
                               types=types, concurrency=2, env=TIMINGS)
        started.append(worker)
        wait_ready(channel, worker)
        return worker

    yield start
    WorkerProcess.kill_survivors(started)


def through(proxy, redis_url):
    """`redis_url` with the proxy in the way."""
    address = urlsplit(redis_url)
    return address._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()


@dataclass
class Run:
    pid: int
    begin: float
    last: float  # its end, or the last tick of a run whose process died
    how: str | None  # "finished", "stopped", or None: it never ended


def runs(ledger):
    """The handler's runs in the order they began."""
    found, current = [], {}  # every run; pid -> its latest run
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    for event, _job, _attempt, pid, at, *how in (line.split() for line in lines):
        if event == "begin":
            current[pid] = Run(int(pid), float(at), float(at), None)
            found.append(current[pid])
        else:
            current[pid].last = float(at)
            if event == "end":
                current[pid].how = how[0]
    return sorted(found, key=lambda run: run.begin)


def done_by(channel, job_id, worker):
    status = channel.status(job_id) or {}
    return status.get("state") == "done" and status.get("worker") == worker.worker_id


def cut_off_and_taken_over(channel, proxy, fleet, redis_url, ledger, payload):
    """Start the worker behind the proxy on a long job, then a direct one, black-hole the
    first and wait until the second has finished the job; returns (cut, other, partitioned_at)."""
    cut = fleet("cut", through(proxy, redis_url), ["stint", "noop"])
    channel.publish("stint", "j1", 1, {"seconds": JOB_S, "again_s": AGAIN_S, "ledger": str(ledger),
                                       **payload})
    wait_for(lambda: runs(ledger))
    other = fleet("other", redis_url, ["stint"])  # only now: the job is already the first's
    partitioned_at = clock()
    proxy.partition()
    wait_for(lambda: done_by(channel, "j1", other), timeout=40)
    return cut, other, partitioned_at


def assert_one_after_another(every, cut, other):
    """The cut-off run came first and ended before any run of the replacement began."""
    first, *later = every
    assert first.pid == cut.pid and later and {run.pid for run in later} == {other.pid}, every
    for earlier, next_run in zip(every, later, strict=False):
        assert earlier.last < next_run.begin, f"runs overlap by {earlier.last - next_run.begin:.3f} s"


def snapshot(channel, ledger, media):
    status = channel.status("j1")
    return (status, (media / status["result"]).read_bytes(), ledger.read_text(),
            channel.queue_lengths(["stint"]), channel.client.get(channel.seen_key("j1", 1)))


@pytest.mark.parametrize("reset", [True, False], ids=["heal-reset", "heal-delivering-held-bytes"])
def test_a_cut_off_worker_stops_its_job_before_another_takes_it_and_writes_nothing_after(
        channel, proxy, fleet, redis_url, tmp_path, reset):
    ledger, media = tmp_path / "ledger", tmp_path / "media"
    cut, other, partitioned_at = cut_off_and_taken_over(channel, proxy, fleet, redis_url, ledger, {})

    every = runs(ledger)
    assert_one_after_another(every, cut, other)
    assert every[0].how == "stopped" and every[-1].how == "finished"
    assert json.loads((media / channel.status("j1")["result"]).read_text()) == {"pid": other.pid}
    before = snapshot(channel, ledger, media)

    healed_at = clock()
    proxy.heal(reset=reset)
    # It serves again: a job only it serves gets done...
    channel.publish("noop", "after", 1, {"echo": "back"})
    wait_for(lambda: done_by(channel, "after", cut))
    served_at = clock()
    # ...and some heartbeats later, nothing of the job it was cut off from has changed.
    beat_at = json.loads(heartbeat(channel, cut))["beat_at"]
    wait_for(lambda: json.loads(heartbeat(channel, cut))["beat_at"] >= beat_at + 3 * INTERVAL_S)
    assert snapshot(channel, ledger, media) == before
    assert cut.process.poll() is None, cut.log()

    log = cut.log()
    # Once per change of state, not once per retry.
    assert log.count("Redis unreachable for") == 1, log
    assert "stopping 1 job(s) whose heartbeat lapses in" in log
    assert log.count("Redis error, retrying") == log.count("Redis is reachable again after") >= 1, log
    assert "Traceback" not in log
    print(f"\nrun gap {every[1].begin - every[0].last:.2f} s (cut-off run stopped "
          f"{every[0].last - partitioned_at:.2f} s after the partition, the replacement began "
          f"{every[1].begin - partitioned_at:.2f} s after it); served again {served_at - healed_at:.2f} s "
          f"after the heal")


def test_a_cut_off_worker_whose_handler_ignores_the_stop_ends_itself_before_another_takes_it(
        channel, proxy, fleet, redis_url, tmp_path):
    ledger = tmp_path / "ledger"
    cut, other, partitioned_at = cut_off_and_taken_over(
        channel, proxy, fleet, redis_url, ledger, {"cooperative": False})

    wait_for(lambda: cut.process.poll() is not None)
    assert cut.process.returncode == FENCE_EXIT_CODE, cut.log()
    assert "did not stop" in cut.log() and f"ends itself (exit code {FENCE_EXIT_CODE})" in cut.log()
    every = runs(ledger)
    assert_one_after_another(every, cut, other)
    assert every[0].how is None and every[-1].how == "finished"
    print(f"\nrun gap {every[1].begin - every[0].last:.2f} s (the cut-off worker's last tick "
          f"{every[0].last - partitioned_at:.2f} s after the partition, the replacement began "
          f"{every[1].begin - partitioned_at:.2f} s after it)")


def test_a_late_report_of_an_attempt_given_to_another_delivery_is_refused(channel):
    """What a cut-off worker sent before it stopped may reach Redis after the heal (a
    network that held it): once the attempt is no longer its delivery's, it changes nothing."""
    channel.publish("stint", "late", 1, {})
    channel.beat("gone", {"worker_id": "gone", "types": ["stint"]})
    _, raw = channel.take(["stint"], "gone", wait_s=1)
    message = parse_message(raw, max_bytes=10**6)
    assert channel.admit(message, "gone:first") is Admission.RUN
    running = new_status("late", 1, State.RUNNING, worker="gone")
    assert channel.write_status(running, "gone:first")
    # Its heartbeat lapses, a reaper returns the attempt: already no longer its own...
    channel.client.delete(channel.worker_key("gone"))
    assert channel.reap_dead_workers() == 1
    assert not channel.write_status({**running, "fraction": 0.5}, "gone:first")
    # ...nor once another worker has taken it.
    _, raw = channel.take(["stint"], "next", wait_s=1)
    assert channel.admit(parse_message(raw, max_bytes=10**6), "next:second") is Admission.RUN
    taken_over = new_status("late", 1, State.RUNNING, worker="next")
    assert channel.write_status(taken_over, "next:second")
    assert not channel.write_status({**running, "fraction": 0.9}, "gone:first")
    assert not channel.finish(message, "gone", new_status("late", 1, State.DONE, worker="gone"),
                              "gone:first")
    assert channel.status("late") == taken_over
    assert channel.held_by("next") == [raw]


@pytest.mark.parametrize("ttl_s, interval_s", [(15, 5), (15, 7.5), (60, 5), (3, 0.5), (3, 1.5), (1, 0.5), (1, 0.1)])
def test_the_fence_comes_after_the_next_beat_and_every_call_fails_before_a_handler_must_stop(
        ttl_s, interval_s):
    config = CVConfig(heartbeat_ttl_s=ttl_s, heartbeat_interval_s=interval_s)
    margin_s = fence_margin_s(config)
    # A healthy worker's next beat lands before its jobs would be fenced...
    assert ttl_s - margin_s > interval_s
    # ...and a call on its way as they are fails before the worker would end itself.
    assert 0 < redis_timeout_s(config) < margin_s * 3 / 4 < ttl_s
