"""Where downloads live on disk, all under MEDIA_ROOT:

    staging/<asset id>/   a fetch or edit in progress (yt-dlp's .part files, ffmpeg's output)
    assets/<asset id>/    the finished file, moved in with one rename

Staging is per asset, not per attempt, so whichever attempt comes next (a
resume, another user's download of the same asset, another machine sharing
the media volume) continues from the partial file. Staging and assets sit on
the same file system, so the move into place is an atomic rename: a reader
sees no file or the whole file.
"""

import os
import shutil
from pathlib import Path

from django.conf import settings

STAGING_DIR = "staging"
ASSETS_DIR = "assets"


def media_root():
    return Path(settings.MEDIA_ROOT)


def staging_dir(asset_id):
    return media_root() / STAGING_DIR / str(int(asset_id))


def asset_dir(asset_id):
    return media_root() / ASSETS_DIR / str(int(asset_id))


def absolute(relative):
    """The path of a stored file; refuses names that would leave MEDIA_ROOT."""
    root = media_root().resolve()
    path = (root / relative).resolve()
    if not relative or root not in path.parents:
        raise ValueError(f"{relative!r} is not a file under MEDIA_ROOT.")
    return path


def exists(relative):
    try:
        return bool(relative) and absolute(relative).is_file()
    except ValueError:
        return False


def place(asset_id, staged):
    """Move a finished file from staging into assets/<id>/; returns its path relative to MEDIA_ROOT.

    The name is fixed ("media.<ext>"), never taken from a title.
    """
    staged = Path(staged)
    target_dir = asset_dir(asset_id)
    target_dir.mkdir(parents=True, exist_ok=True)
    suffix = staged.suffix.lower() if staged.suffix[1:].isalnum() else ""
    target = target_dir / f"media{suffix}"
    os.replace(staged, target)  # atomic within one file system
    return target.relative_to(media_root()).as_posix()


def discard_partial(asset_id):
    """Delete what a stopped fetch or edit of the asset left in staging."""
    shutil.rmtree(staging_dir(asset_id), ignore_errors=True)


def discard_files(asset_id):
    """Delete the asset's finished file(s) and any partial."""
    shutil.rmtree(asset_dir(asset_id), ignore_errors=True)
    discard_partial(asset_id)


def partial_bytes(asset_id):
    """Bytes a paused fetch has kept in staging (0 when none)."""
    folder = staging_dir(asset_id)
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.suffix == ".part")
