"""`import jobs` is the engine's public surface: each name is the very object of the module
that defines it, and nothing is imported before it is asked for."""

import importlib
import subprocess
import sys

import pytest

import jobs

pytestmark = pytest.mark.dbless


@pytest.mark.parametrize("name", jobs.__all__)
def test_each_public_name_is_the_object_its_module_defines(name):
    module = importlib.import_module(jobs._PUBLIC[name])
    assert getattr(jobs, name) is getattr(module, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'enqueu'"):
        jobs.enqueu  # noqa: B018 - the read is the test
    assert set(jobs.__all__) <= set(dir(jobs))


def test_importing_the_package_imports_nothing_else():
    """A settings module imports jobs.conf before Django loads the apps: the package itself
    must not reach the models (that would raise AppRegistryNotReady)."""
    code = ("import sys, jobs; "
            "print(sorted(m for m in sys.modules if m.startswith('jobs.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "[]"


# jobs.services before the engine moved into layers: every name stays callable there.
SERVICES_BEFORE = [
    "build_job", "enqueue", "enqueue_many", "resolve",
    "held", "leave_running", "complete_many", "error_entry", "lock_lease", "report_progress",
    "renew_leases", "fail_unserved", "fail_unreadable",
    "cancel", "cancel_matching", "pause", "resume", "retry", "retry_matching", "move_to_front",
    "move_up", "move_down", "set_priority_tier", "set_limit", "set_rate", "set_queue",
    "command_worker", "cancel_dependent", "note_read", "MAX_ERRORS_KEPT",
]


@pytest.mark.parametrize("name", SERVICES_BEFORE)
def test_every_name_of_jobs_services_is_still_there(name):
    from jobs import services

    assert name in services.__all__ and hasattr(services, name)


@pytest.mark.parametrize(("shim", "target"), [("jobs.child", "jobs.runtime.process.main"),
                                              ("jobs.scheduler", "jobs.runtime.scheduler")])
def test_python_m_of_a_moved_entry_point_runs_its_new_module(shim, target, monkeypatch):
    import runpy

    ran = []
    real = runpy.run_module
    monkeypatch.setattr(runpy, "run_module", lambda name, **kw: ran.append((name, kw)))
    real(shim, run_name="__main__")
    assert ran == [(target, {"run_name": "__main__", "alter_sys": True})]
