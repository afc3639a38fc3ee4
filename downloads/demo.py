"""Something to download offline: generated sample media and a small origin that serves it.

`make run` starts `manage.py demomedia --serve 127.0.0.1:8001` beside the site
and allows that address with DOWNLOADS_EGRESS_ALLOW, so a newcomer can paste
http://127.0.0.1:8001/sample.mp4 (or the HLS playlist) and watch it download.
The origin answers range requests, so pause and resume work against it, and
it sends at a modest rate so the progress bar has something to show.
"""

import re
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from django.conf import settings

from downloads.ffmpeg import locate

DEMO_DIR = "demo"
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
TYPES = {".mp4": "video/mp4", ".m3u8": "application/vnd.apple.mpegurl", ".ts": "video/mp2t"}
CHUNK_BYTES = 64 * 1024


def demo_dir():
    return Path(settings.MEDIA_ROOT) / DEMO_DIR


def generate(folder=None, *, width=1280, height=720, shot_s=5):
    """Write sample.mp4 (four shots with hard cuts, a tone throughout) and hls/index.m3u8.

    Returns the folder. Files already there are kept, so a restart costs nothing.
    """
    folder = Path(folder or demo_dir())
    sample = folder / "sample.mp4"
    ffmpeg = locate().ffmpeg
    if not sample.exists():
        folder.mkdir(parents=True, exist_ok=True)
        size, total = f"{width}x{height}", shot_s * 4
        partial = folder / "sample.partial.mp4"
        subprocess.run([
            ffmpeg, "-hide_banner", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", f"testsrc2=s={size}:d={shot_s}",
            "-f", "lavfi", "-i", f"color=c=0x2f6fdb:s={size}:d={shot_s}",
            "-f", "lavfi", "-i", f"rgbtestsrc=s={size}:d={shot_s}",
            "-f", "lavfi", "-i", f"smptehdbars=s={size}:d={shot_s}",
            "-f", "lavfi", "-i", f"sine=frequency=330:duration={total}",
            "-filter_complex", "[0:v][1:v][2:v][3:v]concat=n=4:v=1:a=0,format=yuv420p[v]",
            "-map", "[v]", "-map", "4:a", "-r", "25", "-t", str(total),
            "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-g", "50",
            "-c:a", "aac", "-movflags", "+faststart", "-f", "mp4", str(partial),
        ], check=True, stdin=subprocess.DEVNULL)
        partial.rename(sample)
    hls = folder / "hls"
    if not (hls / "index.m3u8").exists():
        staging = folder / "hls.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        subprocess.run([
            ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "mp4", "-i", str(sample),
            "-c", "copy", "-f", "hls", "-hls_time", "2", "-hls_playlist_type", "vod",
            "-hls_segment_filename", str(staging / "seg%03d.ts"), str(staging / "index.m3u8"),
        ], check=True, stdin=subprocess.DEVNULL)
        shutil.rmtree(hls, ignore_errors=True)
        staging.rename(hls)
    return folder


class Origin(ThreadingHTTPServer):
    """Serves the files of one folder, with ranges, at most `rate_bytes_s` per response."""

    daemon_threads = True

    def __init__(self, address, folder, rate_bytes_s=None):
        self.folder = Path(folder).resolve()
        self.rate_bytes_s = rate_bytes_s
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address):
        pass  # a paused or cancelled download hangs up mid-file


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Origin

    def log_message(self, format, *args):
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body):
        relative = self.path.split("?", 1)[0].lstrip("/")
        path = (self.server.folder / relative).resolve()
        if self.server.folder not in path.parents or not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = path.stat().st_size
        start, end = 0, size - 1
        match = RANGE.match(self.headers.get("Range", ""))
        if match and int(match.group(1)) < size:
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", TYPES.get(path.suffix, "application/octet-stream"))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if body:
            self._send(path, start, end - start + 1)

    def _send(self, path, start, length):
        rate = self.server.rate_bytes_s
        began = time.monotonic()
        sent = 0
        try:
            with open(path, "rb") as file:
                file.seek(start)
                while sent < length:
                    chunk = file.read(min(CHUNK_BYTES, length - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if rate:
                        ahead_s = sent / rate - (time.monotonic() - began)
                        if ahead_s > 0:
                            time.sleep(ahead_s)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def serve(address, folder, rate_bytes_s=None):
    """Start the origin in a daemon thread; returns it (call shutdown() to stop)."""
    server = Origin(address, folder, rate_bytes_s)
    threading.Thread(target=server.serve_forever, daemon=True, name="demo-origin").start()
    return server
