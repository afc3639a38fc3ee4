"""Serving a stored file with HTTP range requests, so a player can seek.

A single byte range (`Range: bytes=500-`, `bytes=0-99`, `bytes=-500`) is
answered with 206 and that slice; an unsatisfiable one with 416; several
ranges at once, or an `If-Range` that no longer matches the file, with the
whole file (200), as RFC 9110 allows.
"""

import re
from email.utils import formatdate

from django.http import FileResponse, HttpResponse, StreamingHttpResponse

RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
CHUNK_BYTES = 256 * 1024
CONTENT_TYPES = {
    ".mp4": "video/mp4", ".m4v": "video/mp4", ".m4a": "audio/mp4", ".mkv": "video/x-matroska",
    ".webm": "video/webm", ".mp3": "audio/mpeg", ".ogg": "audio/ogg", ".flac": "audio/flac",
    ".wav": "audio/wav", ".ts": "video/mp2t", ".jpg": "image/jpeg",
}


def content_type(path):
    return CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")


def _slice(path, start, length):
    with open(path, "rb") as file:
        file.seek(start)
        while length > 0:
            chunk = file.read(min(CHUNK_BYTES, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


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
        length = int(last)
        if length == 0:
            return "unsatisfiable"
        return max(0, size - length), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or end < start:
        return "unsatisfiable"
    return start, end


def file_response(request, path, *, filename=None, attachment=False):
    stat = path.stat()
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
            response = FileResponse(open(path, "rb"), content_type=content_type(path))
        response["Content-Length"] = str(size)
    else:
        start, end = wanted
        length = end - start + 1
        body = () if request.method == "HEAD" else _slice(path, start, length)
        response = StreamingHttpResponse(body, status=206, content_type=content_type(path))
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
        response["Content-Length"] = str(length)
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = etag
    response["Last-Modified"] = last_modified
    response["Cache-Control"] = "private, max-age=3600"
    if filename:
        disposition = "attachment" if attachment else "inline"
        response.headers["Content-Disposition"] = f"{disposition}; filename*=UTF-8''{_quote(filename)}"
    return response


def _quote(name):
    from urllib.parse import quote

    return quote(name, safe="")
