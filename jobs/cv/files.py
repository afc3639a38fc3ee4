"""Durable files: what is written here survives a crash of the writer.

A reader sees either the previous file or the complete new one, never a torn
half: the data goes to a temporary file in the same folder, is flushed to
disk, and is renamed over the target (a rename within one filesystem is
atomic); the folder is then synced so the rename itself survives a power cut.
"""

import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path, data):
    """Write `data` as JSON to `path` atomically and durably; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        # Never leave a half-written temporary file behind.
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    return path


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _fsync_folder(folder):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
