"""`manage.py housekeeping` as an operator runs it, and MEDIA_MAX_BYTES checked at start-up."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from downloads.models import Download, MediaAsset
from jobs.models import Job
from tests.integration.test_housekeeping import SIZE, finished, on_disk
from tests.servers import database_url

ROOT = Path(__file__).resolve().parents[2]


def manage(*args, env):
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.django_db(transaction=True)
def test_the_command_collects_and_evicts_and_reports_what_it_freed(media_root):
    owner = get_user_model().objects.create_user("dave")
    orphan = finished(owner, 1)
    Download.objects.filter(pk=orphan.pk).delete()
    old, new = finished(owner, 2, used_h_ago=5), finished(owner, 3, used_h_ago=1)
    env = {"DATABASE_URL": database_url(connection), "MEDIA_ROOT": str(media_root),
           "MEDIA_MAX_BYTES": f"{SIZE // 1000}K"}  # 1K: room for one file

    result = manage("housekeeping", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["collected"] == {"assets": 1, "bytes": SIZE}
    assert report["evicted"] == {"assets": 1, "bytes": SIZE}
    assert report["cap_bytes"] == 1024 and not report["over_cap"]
    assert not on_disk(orphan) and not on_disk(old) and on_disk(new)
    assert MediaAsset.objects.get(pk=old.asset_id).state == "pending"

    queued = manage("housekeeping", "--enqueue", env=env)
    again = manage("housekeeping", "--enqueue", env=env)
    assert queued.returncode == again.returncode == 0
    assert queued.stdout == again.stdout  # the same job: at most one live run
    assert Job.objects.filter(kind="downloads.housekeep").count() == 1


def test_a_malformed_cap_stops_start_up_with_one_sentence():
    result = manage("check", env={"MEDIA_MAX_BYTES": "lots"})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("haulage: MEDIA_MAX_BYTES must be a number of bytes")
