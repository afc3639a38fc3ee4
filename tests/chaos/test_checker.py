"""The checker finds each broken guarantee in evidence written by hand (no database, no workers)."""

import pytest

from tests.chaos.checker import (
    AssetRow,
    Event,
    Evidence,
    Fault,
    JobRow,
    Line,
    check,
    executions,
    read_ledger,
)

pytestmark = pytest.mark.dbless

T0 = 1_000_000.0  # wall clock of the made-up runs
MONO = 999_000.0  # monotonic = wall - MONO
A, B, C, D = "tok-a", "tok-b", "tok-c", "tok-d"


def line(event, job, attempt, token, at, *, pid=10, worker=10, extra="-"):
    return Line(event, job, attempt, token, pid, worker, at - MONO, at, extra)


def ledger(*runs):
    """Lines for executions given as (job, attempt, token, start, end, end event)."""
    lines = []
    for job, attempt, token, start, end, how in runs:
        lines.append(line("start", job, attempt, token, start))
        if end is not None:
            lines.append(line(how, job, attempt, token, end))
    return lines


def done(job, token, attempt, keys=()):
    return JobRow(id=job, status="SUCCESSFUL", result={"token": token, "attempt": attempt, "pid": 10},
                  attempts=attempt, keys=tuple(keys), n=job)


def verdict(lines, jobs, events=(), faults=(), limits=None, acked=None, calls=(), samples=()):
    evidence = Evidence(lines=list(lines), jobs=list(jobs), events=list(events), faults=list(faults),
                        limits=limits or {}, acked=set(acked if acked is not None else
                                                       {j.n for j in jobs}),
                        enqueue_calls=list(calls), sampled_violations=list(samples),
                        end_wall=T0 + 1000)
    return check(evidence, scenario="test", seed=1, database="none", bound_s=4.5, slack_s=1.5)


def test_a_clean_run_with_a_rescue_breaks_nothing():
    # Job 1 ran on a worker that died; rescued at +5, run again from +6.
    lines = ledger((1, 1, A, T0, None, None), (1, 2, B, T0 + 6, T0 + 7, "commit"))
    events = [Event(1, "expired", 1, T0 + 5)]
    report = verdict(lines, [done(1, B, 2)], events)
    assert report.ok(), report.describe()


def test_a_second_execution_while_the_first_lease_was_valid_is_an_overlap():
    lines = ledger((1, 1, A, T0, T0 + 3, "abort"), (1, 2, B, T0 + 2, T0 + 4, "commit"))
    events = [Event(1, "expired", 1, T0 + 2.5)]
    report = verdict(lines, [done(1, B, 2)], events)
    assert report.violations() == {"overlaps": 1}
    assert "before the earlier lease ended" in report.overlaps[0][3]


def test_a_second_claim_with_no_event_ending_the_first_is_an_overlap():
    # What a forgotten claim looks like (e.g. acknowledged commits lost in a crash).
    lines = ledger((1, 1, A, T0, None, None), (1, 2, B, T0 + 6, T0 + 7, "commit"))
    report = verdict(lines, [done(1, B, 2)])
    assert [o[3] for o in report.overlaps] == ["the earlier lease never ended"]


def test_a_worker_frozen_between_claim_and_start_is_no_overlap():
    # Claimed (attempt 1), frozen, rescued at +4, run by B from +5; A wakes at +8 and starts.
    lines = ledger((1, 2, B, T0 + 5, T0 + 6, "commit"), (1, 1, A, T0 + 8, T0 + 8.1, "abort"))
    report = verdict(lines, [done(1, B, 2)], [Event(1, "expired", 1, T0 + 4)])
    assert report.ok(), report.describe()
    assert report.stale_starts == 1


def test_a_result_from_an_execution_that_lost_its_lease_is_a_duplicate():
    lines = ledger((1, 1, A, T0, T0 + 9, "commit"), (1, 2, B, T0 + 6, T0 + 7, "commit"))
    events = [Event(1, "expired", 1, T0 + 5)]
    report = verdict(lines, [done(1, A, 1)], events)
    assert "duplicated" in report.violations()
    assert "after its lease ended" in report.duplicated[0][1]
    assert report.reruns_after_commit == 1


def test_a_result_without_a_committing_execution_is_a_duplicate():
    lines = ledger((1, 1, A, T0, T0 + 1, "abort"))
    report = verdict(lines, [done(1, A, 1)])
    assert report.duplicated == [(1, f"execution {A} wrote no commit line")]


def test_a_job_that_did_not_succeed_is_lost_and_an_acknowledged_one_that_vanished_is_missing():
    lines = ledger((1, 1, A, T0, T0 + 1, "commit"))
    stuck = JobRow(id=2, status="RUNNING", result=None, attempts=1, n=2)
    report = verdict(lines, [done(1, A, 1), stuck], acked={1, 2, 3})
    assert report.lost == [(2, "RUNNING", "")]
    assert report.missing_acked == [3]


def test_more_executions_of_a_key_than_its_limit_are_found_in_the_ledger():
    lines = ledger((1, 1, A, T0, T0 + 2, "commit"), (2, 1, B, T0 + 1, T0 + 3, "commit"),
                   (3, 1, C, T0 + 2, T0 + 4, "commit"))
    jobs = [done(1, A, 1, ["user:1"]), done(2, B, 1, ["user:1"]), done(3, C, 1, ["user:1"])]
    assert verdict(lines, jobs, limits={"user:1": 2}).ok()  # at most two at once
    report = verdict(lines, jobs, limits={"user:1": 1})
    assert report.limit_ledger[0][:3] == ("user:1", 1, 2)


def test_an_execution_stops_holding_its_slot_when_its_worker_is_killed():
    # Job 1's worker (pid 10) is killed at +1 and its lease ends at +4; jobs 2
    # and 3 (same key, limit 2) run from +2 and +3: two executions at once, not three.
    lines = [line("start", 1, 1, A, T0),
             line("start", 2, 1, B, T0 + 2, pid=20, worker=20),
             line("start", 3, 1, C, T0 + 3, pid=30, worker=30),
             line("commit", 2, 1, B, T0 + 6, pid=20, worker=20),
             line("commit", 3, 1, C, T0 + 6, pid=30, worker=30),
             line("start", 1, 2, D, T0 + 7, pid=20, worker=20),
             line("commit", 1, 2, D, T0 + 8, pid=20, worker=20)]
    jobs = [done(1, D, 2, ["user:1"]), done(2, B, 1, ["user:1"]), done(3, C, 1, ["user:1"])]
    events = [Event(1, "expired", 1, T0 + 4)]
    kill = Fault("worker_kill", "w", mono=T0 + 1 - MONO, wall=T0 + 1, pid=10)
    assert verdict(lines, jobs, events, faults=[kill], limits={"user:1": 2}).ok()
    report = verdict(lines, jobs, events, faults=[], limits={"user:1": 2})
    assert report.limit_ledger == [("user:1", 2, 3, T0 + 3)]


def test_recovery_is_timed_from_the_fault_to_the_next_claim_and_judged_against_the_bound():
    lines = ledger((1, 1, A, T0, None, None), (1, 2, B, T0 + 8, T0 + 9, "commit"),
                   (2, 1, C, T0, None, None), (2, 2, D, T0 + 6, T0 + 7, "commit"))
    fault = Fault("worker_kill", "w", mono=T0 + 1 - MONO, wall=T0 + 1, pid=10,
                  loses_worker=True, held=[(1, A), (2, C)])
    seen = {(2, D): T0 + 4 - MONO}  # job 2 claimed again at +4 (the sampler), began at +6
    events = [Event(1, "expired", 1, T0 + 4), Event(2, "expired", 1, T0 + 4)]
    evidence = Evidence(lines=lines, jobs=[done(1, B, 2), done(2, D, 2)], events=events,
                        faults=[fault], limits={}, acked={1, 2}, claims_seen=seen)
    report = check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
    assert [round(r[2], 2) for r in report.recoveries] == [7.0]  # job 1, the slower one
    assert report.violations() == {"late recoveries": 1}


def test_time_a_rescued_job_waits_behind_its_full_key_is_queueing_not_recovery():
    # Job 1 (key user:0, limit 1) was lost with its worker at +1 and rescued
    # at +4; job 2 of the same key ran from +3 to +9, and job 1 ran again at
    # +9.5: 8.5 s after the fault, of which 5 s its key was full.
    lines = ledger((1, 1, A, T0, None, None), (1, 2, B, T0 + 9.5, T0 + 10, "commit"),
                   (2, 1, C, T0 + 3, T0 + 9, "commit"))
    fault = Fault("worker_kill", "w", mono=T0 + 1 - MONO, wall=T0 + 1, pid=10,
                  loses_worker=True, held=[(1, A)])
    events = [Event(1, "expired", 1, T0 + 4)]
    jobs = [done(1, B, 2, keys=["user:0"]), done(2, C, 1, keys=["user:0"])]
    report = verdict(lines, jobs, events, [fault], limits={"user:0": 1})
    assert [round(r[2], 2) for r in report.recoveries] == [3.5]
    assert report.ok(), report.describe()
    # With room for two, the key was never full: all 8.5 s count, and are late.
    report = verdict(lines, jobs, events, [fault], limits={"user:0": 2})
    assert [round(r[2], 2) for r in report.recoveries] == [8.5]
    assert report.violations() == {"late recoveries": 1}


def test_an_enqueue_that_takes_too_long_to_answer_is_a_hang():
    lines = ledger((1, 1, A, T0, T0 + 1, "commit"))
    report = verdict(lines, [done(1, A, 1)], calls=[(0.01, ""), (0.2, "OperationalError: down"),
                                                    (7.5, "")])
    assert report.enqueue_refused == 1
    assert report.enqueue_hangs == [(7.5, "answered")]


def test_the_ledger_is_read_from_every_file_and_torn_lines_are_skipped(tmp_path):
    (tmp_path / "1.ledger").write_text(f"start 1 1 {A} 1 1 5.0 {T0} -\ncommit 1 1 {A} 1 1 6.0")
    (tmp_path / "2.ledger").write_text(f"start 2 1 {B} 2 2 5.5 {T0} 4.9\n")
    lines = read_ledger(tmp_path)
    assert [(x.event, x.job) for x in lines] == [("start", 1), ("start", 2)]
    runs = executions(lines)
    assert runs[2][0].began_mono == 4.9  # a child counts from its spawn


def test_a_job_left_waiting_for_its_frozen_worker_counts_as_a_late_recovery():
    frozen = Fault("worker_stop", "w", mono=T0 + 1 - MONO, wall=T0 + 1, pid=10,
                   loses_worker=True, held=[(1, A)])
    # Nobody took job 1 over; its own execution finished it once the worker woke at +10.
    report = verdict(ledger((1, 1, A, T0, T0 + 10, "commit")), [done(1, A, 1)], faults=[frozen])
    assert [(r[2], r[3]["lease ended after s"]) for r in report.recoveries] == [
        (9.0, "never: it waited for its own worker")]
    assert report.violations() == {"late recoveries": 1}
    # A short pause is no recovery at all: the job simply carried on.
    report = verdict(ledger((1, 1, A, T0, T0 + 3, "commit")), [done(1, A, 1)], faults=[frozen])
    assert report.recoveries == [] and report.ok()


def test_a_crashed_childs_job_is_timed_but_not_held_to_the_lease_bound():
    crash = Fault("child_kill", "job-1-tok-a", mono=T0 + 1 - MONO, wall=T0 + 1, pid=11,
                  held=[(1, A)])
    lines = ledger((1, 1, A, T0, None, None), (1, 2, B, T0 + 9, T0 + 10, "commit"))
    report = verdict(lines, [done(1, B, 2)], [Event(1, "retry", 1, T0 + 1.2)], faults=[crash])
    assert [r[2] for r in report.reclaims] == [8.0] and report.recoveries == []
    assert report.ok(), report.describe()


def test_evidence_saved_and_loaded_gives_the_same_verdict(tmp_path):
    from tests.chaos.checker import load, save

    lines = ledger((1, 1, A, T0, T0 + 3, "abort"), (1, 2, B, T0 + 2, T0 + 4, "commit"))
    fault = Fault("worker_kill", "w", mono=T0 - MONO, wall=T0, pid=10, loses_worker=True,
                  held=[(1, A)])
    evidence = Evidence(lines=lines, jobs=[done(1, B, 2, ["user:1"])], faults=[fault],
                        events=[Event(1, "expired", 1, T0 + 2.5)], limits={"user:1": 1},
                        acked={1}, claims_seen={(1, B): T0 + 1.9 - MONO})
    save(evidence, tmp_path / "evidence.json")
    again = load(tmp_path / "evidence.json")
    verdicts = [check(e, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
                for e in (evidence, again)]
    assert verdicts[0].violations() == verdicts[1].violations() == {"overlaps": 1}
    assert verdicts[0].recoveries == verdicts[1].recoveries


# --- CV executions (redis mode): named cv<attempt> ---------------------------------------

CV1 = "cv1"


def test_the_same_cv_attempt_run_again_after_its_first_run_ended_is_no_overlap():
    # Redis lost the attempt's record after it ran; it ran again, once, afterwards.
    lines = ledger((1, 1, CV1, T0, T0 + 1, "commit"), (1, 1, CV1, T0 + 5, T0 + 6, "commit"))
    report = verdict(lines, [done(1, CV1, 1)])
    assert report.ok(), report.describe()
    assert report.cv_executions == 2 and report.reruns_after_commit == 0


def test_the_same_cv_attempt_running_twice_at_once_is_an_overlap():
    lines = [line("start", 1, 1, CV1, T0, pid=10, worker=10),
             line("start", 1, 1, CV1, T0 + 1, pid=20, worker=20),
             line("commit", 1, 1, CV1, T0 + 2, pid=10, worker=10),
             line("commit", 1, 1, CV1, T0 + 3, pid=20, worker=20)]
    report = verdict(lines, [done(1, CV1, 1)])
    assert report.overlaps == [(1, CV1, CV1, "the same CV attempt ran twice at once")]


def test_a_cv_attempt_started_again_after_its_worker_died_is_no_overlap():
    lines = [line("start", 1, 1, CV1, T0, pid=10, worker=10),
             line("start", 1, 1, CV1, T0 + 4, pid=20, worker=20),
             line("commit", 1, 1, CV1, T0 + 5, pid=20, worker=20)]
    evidence = Evidence(lines=lines, jobs=[done(1, CV1, 1)], events=[], faults=[], limits={},
                        acked={1}, exits=[(10, T0 + 2)])
    report = check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
    assert report.ok(), report.describe()


def test_a_requeue_does_not_end_a_cv_attempt_but_a_rescue_does():
    # Requeued (Redis was away at publish), claimed again with the same attempt,
    # and the fleet ran it: the result is that attempt's.
    lines = ledger((1, 1, CV1, T0 + 1, T0 + 2, "commit"))
    assert verdict(lines, [done(1, CV1, 1)], [Event(1, "requeued", 1, T0)]).ok()
    # Rescued: attempt 1's lease is gone, so its result cannot be the job's.
    report = verdict(lines, [done(1, CV1, 1)], [Event(1, "expired", 1, T0 + 1.5)])
    assert report.duplicated == [(1, "result written by cv1 after its lease ended")]


# --- Downloads: assets, staging, failures ------------------------------------------------


def fetch(job, status="SUCCESSFUL", code="", errors=()):
    return JobRow(id=job, status=status, result={"asset": 1}, attempts=1 + len(errors),
                  error_code=code, kind="downloads.fetch", error_codes=tuple(errors))


def downloads_verdict(jobs, *, assets=(), staging=(), paused=(), allowed=None):
    evidence = Evidence(lines=[], jobs=list(jobs), events=[], faults=[], limits={}, acked=set(),
                        assets=list(assets), staging=list(staging), paused_assets=set(paused),
                        allowed_failures=allowed or {})
    return check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)


def test_an_asset_left_downloading_after_the_drain_is_stuck():
    assets = [AssetRow(1, "ready", intact=True), AssetRow(2, "downloading", holder="tok-x"),
              AssetRow(3, "pending")]
    report = downloads_verdict([fetch(1)], assets=assets)
    assert report.stuck_assets == [(2, "tok-x")]
    assert report.violations() == {"assets stuck in downloading": 1}


def test_a_ready_asset_whose_file_is_not_the_origins_bytes_is_corrupt():
    assets = [AssetRow(1, "ready", intact=True), AssetRow(2, "ready", intact=False)]
    assert downloads_verdict([fetch(1)], assets=assets).corrupt_assets == [2]


def test_staging_files_may_stay_only_for_a_paused_download():
    staging = [("4", ["media.mp4.part"]), ("5", ["media.mp4.part", "media.f1.mp4"])]
    report = downloads_verdict([fetch(1)], staging=staging, paused={4})
    assert report.leftover_staging == [("5", ["media.f1.mp4", "media.mp4.part"])]
    assert report.violations() == {"leftover staging": 1}


def test_a_download_may_fail_only_with_an_error_the_scenario_explains():
    allowed = {"storage_full": "the disk was full"}
    jobs = [fetch(1, errors=["storage_full"]),
            fetch(2, "FAILED", "storage_full", errors=["storage_full"] * 3)]
    report = downloads_verdict(jobs, allowed=allowed)
    assert report.ok(), report.describe()
    assert report.failed_allowed == {"storage_full": 1}
    assert report.attempt_errors == {"storage_full": 4}
    # A bare error on the way is unexplained, and a download still live after the drain is lost.
    report = downloads_verdict([fetch(1, errors=["error"]), fetch(2, "READY")], allowed=allowed)
    assert report.unclear_errors == [(1, "error")]
    assert report.lost == [(2, "READY", "")]


def test_a_lost_workers_job_that_the_rescue_failed_for_good_counts_as_recovered_then():
    # Its last attempt: the rescue 4 s after the kill failed it; nothing runs it again.
    kill = Fault("worker_kill", "w", mono=T0 - MONO, wall=T0, pid=10, loses_worker=True,
                 held=[(1, A)])
    job = JobRow(id=1, status="FAILED", result=None, attempts=3, error_code="lease_expired",
                 kind="downloads.fetch", error_codes=("crashed", "crashed", "lease_expired"))
    evidence = Evidence(lines=[], jobs=[job], events=[Event(1, "expired", 3, T0 + 4)],
                        faults=[kill], limits={}, acked=set(),
                        allowed_failures={"crashed": "", "lease_expired": ""})
    report = check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
    assert report.ok(), report.describe()
    assert [round(r[2], 2) for r in report.recoveries] == [4.0]
    # Without that rescue the job was never taken from its dead worker.
    evidence.events = []
    report = check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
    assert report.unrecovered == [("worker_kill", "w", 1)]


def test_a_rescued_download_is_held_to_the_bound_until_its_rescue_not_its_next_claim():
    # Rescued 3 s after its worker died, claimed again at 9 s once its asset's slot was free.
    kill = Fault("worker_kill", "w", mono=T0 - MONO, wall=T0, pid=10, loses_worker=True,
                 held=[(1, A)])
    job = JobRow(id=1, status="SUCCESSFUL", result={"asset": 1}, attempts=2,
                 kind="downloads.fetch")
    events = [Event(1, "expired", 1, T0 + 3)]
    evidence = Evidence(lines=[], jobs=[job], events=events, faults=[kill], limits={},
                        acked=set(), claims_seen={(1, B): T0 + 9 - MONO})
    report = check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
    assert report.ok(), report.describe()
    assert [r[2] for r in report.recoveries] == [3.0] and [r[2] for r in report.reclaims] == [9.0]
    # A rescue that came late is late.
    evidence.events = [Event(1, "expired", 1, T0 + 7)]
    report = check(evidence, scenario="t", seed=1, database="none", bound_s=4.5, slack_s=1.5)
    assert report.violations() == {"late recoveries": 1}
