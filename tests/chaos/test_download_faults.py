"""The small tier for downloads: real yt-dlp children fetching from a loopback origin.

Workers and children are killed mid-transfer, or the media disk (a small
tmpfs) fills up; afterwards no asset may be left `downloading`, no staging
file may be left behind, and every ready file must be the origin's bytes.
"""

import pytest

from tests.chaos import scenarios

# Processes and files are the subject; `make chaos` runs these on SQLite too.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.once]

SMALL = {"workers": 3, "concurrency": 4, "duration_s": 6}


def test_killed_workers_and_children_leave_no_asset_downloading_and_no_staging_files(chaos):
    # Two seconds longer: the first transfer starts only once a child has
    # imported yt-dlp, and each kill waits for one.
    report = chaos(scenarios.DownloadKill(downloads=20), **{**SMALL, "duration_s": 8})
    assert sum(report.faults.values()) >= 2, report.describe()
    report.require_ok()


def test_a_full_media_disk_fails_or_retries_downloads_with_a_storage_error_and_spoils_nothing(
        chaos):
    report = chaos(scenarios.DiskFull(downloads=20), **SMALL)
    assert report.faults["disk_full"] >= 1, report.describe()
    assert report.attempt_errors["storage_full"] >= 1, report.describe()  # the disk did fill up
    report.require_ok()
