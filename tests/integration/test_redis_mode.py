"""Redis-mode jobs: claimed by a runworker, run by a CV worker, recorded in the database."""

import os
import subprocess
import sys

import pytest
from django.db import connection

from jobs import services
from jobs.cv import clients
from jobs.models import JobStatus
from tests.acceptance.conftest import ROOT
from tests.servers import database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cv_handlers(settings):
    settings.JOBS_HANDLER_MODULES = ["tests.cv_handlers"]


@pytest.fixture
def local_mode(settings, cv_handlers):
    settings.REDIS_URL = ""
    clients._clients.clear()
    yield
    clients._clients.clear()


def test_local_mode_runs_cv_jobs_on_the_embedded_worker(run_worker, local_mode):
    job = services.enqueue("tests.cv_progress", {"steps": 3})
    run_worker(queues=["cv"], timeout=30)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCESSFUL
    assert job.result == {"ingested_steps": 3}


def test_a_failing_cv_job_fails_with_its_error(run_worker, local_mode):
    job = services.enqueue("tests.cv_fail", {"message": "bad clip"})
    run_worker(queues=["cv"], timeout=30)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "bad clip" in job.error


def test_a_cv_handler_calling_sys_exit_fails_its_job_and_the_worker_goes_on(run_worker, local_mode):
    exits = services.enqueue("tests.cv_fail", {"exit": 3})
    after = services.enqueue("tests.cv_progress", {"steps": 2})
    run_worker(queues=["cv"], timeout=30)
    exits.refresh_from_db()
    after.refresh_from_db()
    assert exits.status == JobStatus.FAILED
    assert exits.error == "3"
    assert after.status == JobStatus.SUCCESSFUL, after.error


def test_real_redis_and_a_cv_worker_process(run_worker, settings, redis_url, cv_handlers, tmp_path):
    settings.REDIS_URL = redis_url
    clients._clients.clear()
    clients.get_client().flushdb()
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": database_url(connection),
           "JOBS_HANDLER_MODULES": "tests.cv_handlers"}
    cv = subprocess.Popen([sys.executable, "manage.py", "runcvworker", "--concurrency", "2"],
                          cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        jobs = [services.enqueue("tests.cv_noop", {"echo": i}) for i in range(5)]
        run_worker(queues=["cv"], timeout=60)
    finally:
        cv.terminate()
        cv.wait(30)
        clients._clients.clear()
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCESSFUL, job.error
        assert job.result["result"].startswith(f"cv/{job.pk}/")


def test_a_result_that_cannot_be_ingested_fails_the_job_once(run_worker, local_mode):
    job = services.enqueue("tests.cv_bad_result", {"echo": 1})
    run_worker(queues=["cv"], timeout=30)
    job.refresh_from_db()
    assert (job.status, job.error_code, job.attempts) == (JobStatus.FAILED, "bad_result", 1)
