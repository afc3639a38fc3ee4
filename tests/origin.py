"""A local HTTP origin for download tests, on 127.0.0.1 and a free port.

    with Origin() as origin:
        origin.add_file("/clip.mp4", path_or_bytes, throttle_bytes_s=256_000)
        url = origin.url("/clip.mp4")
        ...
        assert origin.requests_for("/clip.mp4")[-1].range_start > 0

What it can serve: files (Range requests answered with 206), a throttled
rate, a drip that sends a few bytes and then holds the connection open, a
response without Content-Length (the body ends when the connection closes),
redirects, and whole folders (an HLS rendition). Every request is recorded,
so a test can assert that a server saw nothing at all.
"""

import mimetypes
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CONTENT_TYPES = {
    ".mp4": "video/mp4",
    ".m4a": "audio/mp4",
    ".m3u8": "application/vnd.apple.mpegurl",
    ".ts": "video/mp2t",
    ".webm": "video/webm",
    ".xml": "application/rss+xml",
}
CHUNK_BYTES = 16 * 1024
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Resource:
    """What the origin answers for one path."""

    data: bytes = b""
    content_type: str = "application/octet-stream"
    throttle_bytes_s: int | None = None  # None: as fast as the socket takes it
    drip_bytes: int | None = None  # send this many body bytes, then stall until released
    content_length: bool = True  # False: no Content-Length, no ranges, close to end the body
    redirect_to: str | None = None
    status: int = 200


@dataclass
class Seen:
    """One request as the origin received it."""

    method: str
    path: str
    range_start: int | None
    headers: dict = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients hang up mid-transfer on purpose (cancel, size limits, blocked redirects)


class Origin:
    def __init__(self):
        self.resources = {}
        self.requests = []
        self.stalled = threading.Event()  # set once a drip has sent its bytes
        self._release = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = None

    # --- life -------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})
        self._thread.start()
        return self

    def stop(self):
        # Release drips first: their handler threads hold connections open.
        self._stopping.set()
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._server.server_address[1]

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    # --- content ----------------------------------------------------------
    def add_file(self, path, content, *, content_type=None, **options):
        data = content if isinstance(content, bytes) else Path(content).read_bytes()
        if content_type is None:
            content_type = CONTENT_TYPES.get(Path(path).suffix) or (
                mimetypes.guess_type(path)[0] or "application/octet-stream"
            )
        self.resources[path] = Resource(data=data, content_type=content_type, **options)
        return self.url(path)

    def add_redirect(self, path, location, status=302):
        self.resources[path] = Resource(redirect_to=location, status=status)
        return self.url(path)

    def add_folder(self, prefix, folder, **options):
        """Serve every file of `folder` under `prefix` (e.g. an HLS playlist and its segments)."""
        for item in sorted(Path(folder).iterdir()):
            if item.is_file():
                self.add_file(f"{prefix.rstrip('/')}/{item.name}", item, **options)
        return self.url(prefix.rstrip("/") + "/")

    def release(self):
        """Let stalled drips finish (by closing their connections)."""
        self._release.set()

    # --- what it saw ------------------------------------------------------
    def requests_for(self, path):
        with self._lock:
            return [seen for seen in self.requests if seen.path == path]

    def saw_nothing(self):
        with self._lock:
            return not self.requests

    def _record(self, seen):
        with self._lock:
            self.requests.append(seen)

    def _handler_class(self):
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def _answer(self, body):
                path = self.path.split("?", 1)[0]
                match = RANGE.match(self.headers.get("Range", ""))
                origin._record(Seen(
                    method=self.command, path=path,
                    range_start=int(match.group(1)) if match else None,
                    headers=dict(self.headers),
                ))
                resource = origin.resources.get(path)
                if resource is None:
                    self._plain(404, b"not found")
                elif resource.redirect_to:
                    self.send_response(resource.status)
                    self.send_header("Location", resource.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._send(resource, match, body)

            def _plain(self, status, text):
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def _send(self, resource, match, body):
                data = resource.data
                start, end = 0, len(data)
                if match and resource.content_length:
                    start = int(match.group(1))
                    if match.group(2):
                        end = min(end, int(match.group(2)) + 1)
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                else:
                    self.send_response(resource.status)
                self.send_header("Content-Type", resource.content_type)
                if resource.content_length:
                    self.send_header("Accept-Ranges", "bytes")
                    self.send_header("Content-Length", str(end - start))
                else:
                    # Without a length the body ends when the connection does.
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if body:
                    self._body(resource, data[start:end])

            def _body(self, resource, payload):
                try:
                    if resource.drip_bytes is not None:
                        self.wfile.write(payload[:resource.drip_bytes])
                        self.wfile.flush()
                        origin.stalled.set()
                        origin._release.wait()
                        self.close_connection = True
                        return
                    rate = resource.throttle_bytes_s
                    chunk = CHUNK_BYTES if rate is None else max(1, min(CHUNK_BYTES, rate // 20))
                    started = time.monotonic()
                    for offset in range(0, len(payload), chunk):
                        if origin._stopping.is_set() and rate is not None:
                            return  # stopping: do not keep a throttled send alive
                        self.wfile.write(payload[offset:offset + chunk])
                        if rate is not None:
                            # Sleep until this many bytes are due at the configured rate.
                            due_s = (offset + chunk) / rate - (time.monotonic() - started)
                            if due_s > 0:
                                time.sleep(due_s)
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    # The client went away (a cancelled or refused download).
                    self.close_connection = True

        return Handler
