"""The test runner's own rules: which arguments go where, when a run fails."""

from tests import runner


def test_path_arguments_replace_the_layers_and_the_rest_go_to_pytest():
    wanted, marks, paths, rest = runner.split_arguments(
        ["--db", "sqlite", "-m", "slow", "tests/unit", "-x", "-k", "name"])
    assert (wanted, marks, paths) == ("sqlite", "slow", ["tests/unit"])
    assert rest == ["-x", "-k", "name"]


def test_a_database_that_collected_nothing_in_either_phase_fails():
    nothing = runner.Database("sqlite", "", [], "", 8, codes=[5, 5])
    some = runner.Database("sqlite", "", [], "", 8, codes=[0, 5])
    assert runner.verdict(nothing) == runner.NO_TESTS_COLLECTED
    assert runner.verdict(some) == 0


def test_failures_are_read_back_from_both_phases_reports(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "sqlite-parallel.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.a" name="test_ok"/>'
        '<testcase classname="tests.a" name="test_bad">'
        '<failure message="assert 1 == 2&#10;more">trace</failure></testcase>'
        '</testsuite></testsuites>')
    (reports / "sqlite-serial.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.b" name="test_setup">'
        '<error message="">trace</error></testcase></testsuite></testsuites>')
    (reports / "postgres-serial.xml").write_text("<not xml")
    database = runner.Database("sqlite", "", [], "", 8)
    assert runner.failures(tmp_path, database) == [
        "tests.a::test_bad (failure): assert 1 == 2",
        "tests.b::test_setup (error)",
    ]
    assert runner.failures(tmp_path, runner.Database("postgres", "", [], "", 0)) == [
        "postgres-serial.xml: unreadable report"]


def test_a_failed_tests_logged_errors_follow_it_and_a_passing_tests_do_not(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    worker_log = "\n".join([
        "--- runworker 0 (pid 7) ---",
        "2026-12-04 22:21:06,047 INFO jobs.history: job 1 succeeded -> SUCCESSFUL",
        "2026-12-04 22:21:07,100 WARNING jobs.history: job 2 (downloads.segment, attempt 1/3)"
        " failed -> READY: lease expired",
        "Traceback (most recent call last):",
        "2026-12-04 22:21:09,300 ERROR jobs.history: job 2 (downloads.segment, attempt 3/3)"
        " failed -> FAILED: lease expired",
    ])
    (reports / "postgres-parallel.xml").write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.e2e.a" name="test_ok"><system-out>ERROR in a passing test'
        '</system-out></testcase>'
        '<testcase classname="tests.e2e.a" name="test_slow"><failure message="Timeout">trace'
        f'</failure><system-out>{worker_log}</system-out></testcase>'
        '</testsuite></testsuites>')
    assert runner.failures(tmp_path, runner.Database("postgres", "", [], "", 0)) == [
        "tests.e2e.a::test_slow (failure): Timeout",
        "  2026-12-04 22:21:07,100 WARNING jobs.history: job 2 (downloads.segment, attempt 1/3)"
        " failed -> READY: lease expired",
        "  Traceback (most recent call last):",
        "  2026-12-04 22:21:09,300 ERROR jobs.history: job 2 (downloads.segment, attempt 3/3)"
        " failed -> FAILED: lease expired",
    ]


def test_the_pgbouncer_pass_reruns_its_own_files_and_only_those():
    everything = [runner.Database("postgres", "", [], "", 0),
                  runner.Database("pgbouncer", "", [], "", 16, extra=True),
                  runner.Database("sqlite", "", [], "", 8)]
    names = lambda chosen: [d.name for d in chosen]  # noqa: E731
    assert names(runner.choose(everything, None, [])) == ["postgres", "pgbouncer", "sqlite"]
    assert names(runner.choose(everything, None, ["tests/unit"])) == ["postgres", "sqlite"]
    assert names(runner.choose(everything, "pgbouncer", ["tests/unit"])) == ["pgbouncer"]
    # A -k that matches none of its files: no failure, unless the pass was asked for.
    empty = runner.Database("pgbouncer", "", [], "", 16, extra=True, codes=[5, 5])
    assert runner.verdict(empty) == 0
    assert runner.verdict(empty, asked=True) == runner.NO_TESTS_COLLECTED
