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
