"""Serving a stored file with HTTP range requests, so a player can seek.

A single byte range (`Range: bytes=500-`, `bytes=0-99`, `bytes=-500`) is
answered with 206 and that slice; an unsatisfiable one with 416; several
ranges at once, or an `If-Range` that no longer matches the file, with the
whole file (200), as RFC 9110 allows.

A file is read under a shared `flock` held for the life of the response, and
storage housekeeping deletes one only under an exclusive lock it takes
without waiting (`unless_read`): a file a player is streaming, from this
process or any other on the machine, is never deleted under it. The lock is
`flock`, not `fcntl`/`lockf` record locks: those belong to a process, so two
threads of one server would not see each other's. Across machines sharing
the media volume over NFS, Linux maps `flock` onto the server's byte-range
locks, so readers elsewhere are seen too (other network file systems may not).
"""

import contextlib
import fcntl
import os
import re
from email.utils import formatdate

from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse

RANGE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")  # ASCII digits only ("²" is a \d)
BEYOND_ANY_FILE = 10**18  # a position of more digits is read as this (int() refuses 4,300)
CHUNK_BYTES = 256 * 1024
CONTENT_TYPES = {
    ".mp4": "video/mp4", ".m4v": "video/mp4", ".m4a": "audio/mp4", ".mkv": "video/x-matroska",
    ".webm": "video/webm", ".mp3": "audio/mpeg", ".ogg": "audio/ogg", ".flac": "audio/flac",
    ".wav": "audio/wav", ".ts": "video/mp2t", ".jpg": "image/jpeg",
}


def content_type(path):
    return CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")


def open_shared(path):
    """Open a stored file for reading and hold a shared lock on it until it is closed; Http404
    when it is gone (deleted before the open, or between the open and the lock)."""
    try:
        file = open(path, "rb")  # noqa: SIM115 - the response closes it
    except FileNotFoundError:
        raise Http404 from None
    try:
        # Blocks only while housekeeping holds the exclusive lock, which it
        # takes without waiting and keeps just for the unlink.
        fcntl.flock(file.fileno(), fcntl.LOCK_SH)
        # Opened before an eviction's unlink but locked after it: the name is
        # gone and the bytes are about to be freed; never serve them.
        if os.fstat(file.fileno()).st_nlink == 0:
            raise Http404
    except BaseException:
        file.close()
        raise
    return file


@contextlib.contextmanager
def unless_read(path):
    """Yield True while holding `path` exclusively (nobody reads it), False when a reader holds it.

    Delete the file inside the block: a reader that opens it afterwards finds
    no file, and one that opened it just before finds it unlinked once it has
    its lock (`open_shared`), so no player starts on a file being deleted.
    """
    try:
        file = open(path, "rb")
    except FileNotFoundError:
        yield True  # nothing on disk to protect
        return
    with file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True  # closing the file releases the lock


class _Slice:
    """The bytes [start, start + length) of an open file; closing it closes the file (and so
    releases its shared lock), whether or not the body was read."""

    def __init__(self, file, start, length):
        self.file, self.start, self.length = file, start, length

    def __iter__(self):
        self.file.seek(self.start)
        length = self.length
        while length > 0:
            chunk = self.file.read(min(CHUNK_BYTES, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk

    def close(self):
        self.file.close()


def _position(digits):
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) < 19 else BEYOND_ANY_FILE


def requested_range(header, size):
    """(start, end inclusive) for a single satisfiable range; None to send everything;
    "unsatisfiable" for a range outside the file."""
    match = RANGE.match((header or "").strip())
    if not match:
        return None  # no range, several ranges, or another unit
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the final `last` bytes
        length = _position(last)
        if length == 0:
            return "unsatisfiable"
        return max(0, size - length), size - 1
    start = _position(first)
    end = min(_position(last), size - 1) if last else size - 1
    if start >= size or end < start:
        return "unsatisfiable"
    return start, end


def file_response(request, path, *, filename=None, attachment=False):
    """The file at `path` (whole, or the requested range); Http404 if it is gone. The response
    holds the file open, under its shared lock, until the server closes the response."""
    file = open_shared(path)
    try:
        response = _respond(request, path, file)
    except BaseException:
        file.close()
        raise
    if request.method == "HEAD" or response.status_code == 416:
        file.close()  # no body: nothing to keep open
    if filename:
        disposition = "attachment" if attachment else "inline"
        response.headers["Content-Disposition"] = f"{disposition}; filename*=UTF-8''{_quote(filename)}"
    return response


def _respond(request, path, file):
    stat = os.fstat(file.fileno())  # the file being sent, even if the name moves on meanwhile
    size = stat.st_size
    etag = f'"{stat.st_mtime_ns:x}-{size:x}"'
    last_modified = formatdate(stat.st_mtime, usegmt=True)
    wanted = requested_range(request.headers.get("Range"), size)
    if_range = request.headers.get("If-Range")
    if if_range and if_range not in (etag, last_modified):
        wanted = None  # the file changed since the client's first part: start over
    if wanted == "unsatisfiable":
        response = HttpResponse(status=416)
        response["Content-Range"] = f"bytes */{size}"
    elif wanted is None:
        if request.method == "HEAD":
            response = HttpResponse(content_type=content_type(path))
        else:
            response = FileResponse(file, content_type=content_type(path))
        response["Content-Length"] = str(size)
    else:
        start, end = wanted
        length = end - start + 1
        body = () if request.method == "HEAD" else _Slice(file, start, length)
        response = StreamingHttpResponse(body, status=206, content_type=content_type(path))
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
        response["Content-Length"] = str(length)
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = etag
    response["Last-Modified"] = last_modified
    response["Cache-Control"] = "private, max-age=3600"
    return response


def _quote(name):
    from urllib.parse import quote

    return quote(name, safe="")
