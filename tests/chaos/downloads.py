"""Real downloads in a chaos run: a loopback origin, users, and `downloads.fetch` jobs.

    downloads = Downloads(run, DownloadLoad(downloads=40, files=6)).start()
    downloads.submit(spec)        # from the load generator: one user's download of one file
    downloads.evidence()          # assets, staging folders, paused assets, after the drain
    downloads.close()

The workers fetch with yt-dlp in supervised children from an origin on
127.0.0.1 (allowed by DOWNLOADS_EGRESS_ALLOW) into a MEDIA_ROOT of the run's
own, which a scenario may put on a small tmpfs (`mount_tmpfs`). Each file is
served at a throttled rate, so a fetch lasts long enough for a fault to land
in the middle of it, and many users share each file (one asset, fetched once).
"""

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.test.utils import override_settings

KIND = "downloads.fetch"
QUEUE = "downloads"
KB = 1024


@dataclass(frozen=True)
class DownloadLoad:
    downloads: int = 40  # submissions, spread over the load window
    files: int = 6  # distinct files on the origin (so assets shared by several users)
    users: int = 4
    file_bytes: tuple = (300 * KB, 900 * KB)
    throttle_bytes_s: int = 250 * KB
    concurrent_per_user: int = 2

    def plan(self, rng):
        """[(KIND, payload, {})]: payload {"n", "user", "file"}, numbered after the ledger jobs."""
        return [(KIND, {"user": rng.randrange(self.users), "file": rng.randrange(self.files)}, {})
                for _ in range(self.downloads)]


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Downloads:
    def __init__(self, run, load, *, media_root):
        self.run = run
        self.load = load
        self.media_root = Path(media_root)
        self.origin = None
        self.urls = []  # file number -> URL
        self.digests = {}  # URL -> sha256 of what the origin serves
        self.users = []
        self.override = None

    def start(self):
        from django.contrib.auth import get_user_model

        from downloads.models import DownloadQuota
        from tests import media
        from tests.origin import Origin

        self.media_root.mkdir(parents=True, exist_ok=True)
        self.origin = Origin().start()
        for number in range(self.load.files):
            low, high = self.load.file_bytes
            size = low + (high - low) * number // max(1, self.load.files - 1)
            path = media.padded_mp4(size, seed=self.run.config.seed % 1000 + number)
            url = self.origin.add_file(f"/chaos/{number}.mp4", path,
                                       throttle_bytes_s=self.load.throttle_bytes_s)
            self.urls.append(url)
            self.digests[url] = sha256(path)
        allow = f"127.0.0.1:{self.origin.port}"
        settings = {"MEDIA_ROOT": self.media_root, "DOWNLOADS_EGRESS_ALLOW": allow,
                    "DOWNLOADS_SEGMENT_AUTOMATICALLY": False}
        # This process submits (the URL check) and reads the files back.
        self.override = override_settings(**settings)
        self.override.enable()
        self.run.extra_env.update({
            "MEDIA_ROOT": str(self.media_root), "DOWNLOADS_EGRESS_ALLOW": allow,
            "DOWNLOADS_SEGMENT_AUTOMATICALLY": "0", "DOWNLOADS_SOCKET_TIMEOUT_S": "5",
        })
        User = get_user_model()
        for number in range(self.load.users):
            user = User.objects.create_user(f"chaos-{self.run.id}-{number}")
            DownloadQuota.objects.create(user=user, max_concurrent=self.load.concurrent_per_user,
                                         max_queued=100_000, storage_bytes=10**12)
            self.users.append(user)
        return self

    def limits(self):
        return {f"user:{user.pk}": self.load.concurrent_per_user for user in self.users}

    def submit(self, payload):
        from downloads import services

        services.download_submit(owner=self.users[payload["user"]], url=self.urls[payload["file"]])

    def evidence(self):
        """(assets, staging folders with files, assets a paused download keeps a partial for)."""
        from downloads import storage
        from downloads.models import Download, MediaAsset
        from jobs.models import JobStatus
        from tests.chaos.checker import AssetRow

        assets = []
        for asset in MediaAsset.objects.filter(url__in=self.digests):
            intact = None
            if asset.state == MediaAsset.State.READY:
                path = storage.absolute(asset.file) if asset.file else None
                intact = bool(path and path.is_file()
                              and sha256(path) == self.digests[asset.url])
            assets.append(AssetRow(id=asset.pk, state=asset.state, holder=asset.holder,
                                   intact=intact))
        staging = []
        root = self.media_root / storage.STAGING_DIR
        if root.is_dir():
            for folder in sorted(root.iterdir()):
                files = [p.name for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
                if files:
                    staging.append((folder.name, files))
        paused = set(Download.objects.filter(job__status=JobStatus.PAUSED)
                     .values_list("asset_id", flat=True))
        return assets, staging, paused

    def close(self):
        if self.origin is not None:
            self.origin.stop()
            self.origin = None
        if self.override is not None:
            self.override.disable()
            self.override = None


# --- A small disk for MEDIA_ROOT -----------------------------------------------------------


class MountRefused(Exception):
    """This machine does not let the run mount a tmpfs (not root, or no CAP_SYS_ADMIN)."""


def mount_tmpfs(path, size_bytes):
    """Mount a tmpfs of `size_bytes` at `path`; MountRefused when mounting is not permitted."""
    Path(path).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_bytes)},mode=0755",
                           "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise MountRefused(f"mount -t tmpfs at {path} failed: {done.stderr.strip() or done.returncode}")


def unmount(path):
    """Unmount `path` (lazily, so a process still inside it cannot keep it mounted)."""
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path, leave_bytes=64 * KB):
    """Fill the file system of `path` up to `leave_bytes` free with one file; returns its path."""
    filler = Path(path) / "chaos-filler"
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "ab", buffering=0) as f:
        left = max(0, free - leave_bytes)
        chunk = b"\0" * (1 << 20)
        while left > 0:
            try:
                left -= f.write(chunk[:min(len(chunk), left)])
            except OSError:
                break
    return filler
