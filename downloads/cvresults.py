"""Durable CV results: one JSON file per job under MEDIA_ROOT/cv/<job id>/, beside its images.

The CV worker writes the result here before it reports success through Redis, so Redis is
never the only copy; the engine ingests the file into the database. A file is written to a
temporary name, flushed to disk and renamed over the final name, so a reader (or a worker
killed halfway) only ever leaves the previous complete file or the new complete file, never a
torn one. Reading validates the shape, so a file from another version or a half-copied media
volume fails loudly instead of ingesting garbage.
"""

import json
import os
import re
import tempfile
from pathlib import Path, PurePosixPath

RESULT_VERSION = 1
RESULT_NAME = "result.json"
CV_DIR = "cv"
MAX_RESULT_BYTES = 16 * 1024 * 1024  # a 10-hour video's shot list is well under 1 MiB
JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

# Keys each kind of result must have, and the JSON types their values take.
NUMBER = (int, float)
REQUIRED = {
    "segment": {"fps": NUMBER, "frame_count": int, "duration_s": NUMBER, "shots": list},
    "analyze": {"start_s": NUMBER, "end_s": NUMBER, "duration_s": NUMBER,
                "brightness": NUMBER, "motion": list, "colors": list, "keyframe_strip": str},
}
SHOT_REQUIRED = {"index": int, "start_s": NUMBER, "end_s": NUMBER, "start_frame": int,
                 "end_frame": int, "thumbnail": str}


class ResultError(Exception):
    """A result file cannot be used; see the subclass for why."""


class ResultMissing(ResultError):
    """No result file exists yet (the job has not finished, or its output was deleted)."""


class ResultInvalid(ResultError):
    """The result file is not JSON, too large, from another version, or not the shape we write."""


def job_dir(media_root, job_id):
    """The folder holding job `job_id`'s result and images: MEDIA_ROOT/cv/<job id>/."""
    job_id = str(job_id)
    # The id becomes a path component: refuse anything that could climb out of cv/.
    if not JOB_ID.fullmatch(job_id):
        raise ValueError(f"A CV job id must be 1-64 letters, digits, '_' or '-', not {job_id!r}.")
    return Path(media_root) / CV_DIR / job_id


def result_path(media_root, job_id):
    return job_dir(media_root, job_id) / RESULT_NAME


def write_result(path, data):
    """Write `data` (a dict from `downloads.cv`) as the result file `path`, atomically and
    durably, stamped with RESULT_VERSION. Returns the dict as written."""
    path = Path(path)
    document = {**data, "version": RESULT_VERSION}
    validate(document)
    payload = json.dumps(document, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file lives in the same folder so os.replace() is a rename within one file
    # system, which POSIX makes atomic.
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                           suffix=".partial")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # and the rename itself survives a power cut
    return document


def read_result(path):
    """The result dict stored at `path`, validated; raises ResultMissing or ResultInvalid."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_RESULT_BYTES + 1)
    except FileNotFoundError:
        raise ResultMissing(f"No CV result at {path}.") from None
    if len(raw) > MAX_RESULT_BYTES:
        raise ResultInvalid(f"{path} is larger than {MAX_RESULT_BYTES} bytes.")
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ResultInvalid(f"{path} is not JSON: {exc}") from None
    try:
        validate(document)
    except ResultInvalid as exc:
        raise ResultInvalid(f"{path}: {exc}") from None
    return document


def validate(document):
    """Raise ResultInvalid unless `document` has the version, kind and fields this code writes.

    Image paths must be relative and stay inside the job's folder: they are joined to it to
    build URLs and to delete files.
    """
    if not isinstance(document, dict):
        raise ResultInvalid("a result must be a JSON object")
    if document.get("version") != RESULT_VERSION:
        raise ResultInvalid(
            f"version {document.get('version')!r}, this code reads version {RESULT_VERSION}"
        )
    kind = document.get("kind")
    if kind not in REQUIRED:
        raise ResultInvalid(f"unknown kind {kind!r}")
    _check_fields(document, REQUIRED[kind], kind)
    if kind == "segment":
        for position, shot in enumerate(document["shots"]):
            if not isinstance(shot, dict):
                raise ResultInvalid(f"shot {position} is not an object")
            _check_fields(shot, SHOT_REQUIRED, f"shot {position}")
            _check_relative(shot["thumbnail"])
    else:
        _check_relative(document["keyframe_strip"])


def _check_fields(mapping, required, where):
    for key, kind in required.items():
        value = mapping.get(key)
        # bool is an int in Python, never a count or a time here
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ResultInvalid(f"{where}: {key!r} is missing or not {_type_name(kind)}")


def _check_relative(name):
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise ResultInvalid(f"image path {name!r} is not a plain relative path")


def _type_name(kind):
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _refuse_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _fsync_dir(directory):
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
