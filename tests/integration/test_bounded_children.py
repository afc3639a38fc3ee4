"""Bounded children and reads: the memory of the processes that run yt-dlp and ffmpeg, what
yt-dlp reads of a reply, and how much of the AI gateway's answer is read.

A hostile origin answers a gibibyte made as it is sent. Downloads and listings run in child
processes holding the kinds' own limits (their environment says them, as the supervisor's
does); a child's peak memory is its rusage, read when it is reaped.
"""

import json
import os
import re
import subprocess
import sys
import threading
import tracemalloc
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from downloads import conf as downloads_conf
from downloads import services
from insights import generators
from insights.models import InsightKind
from jobs.engine import registry
from jobs.exceptions import Fail
from jobs.models import JobStatus
from jobs.runtime.process.child import EXIT_ADDRESS_SPACE, LIMITS_ENV, Limits, has_marker
from jobs.runtime.process.parent import python_env
from project.env import SettingsError
from tests import media
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - the fixture
from tests.gateway import FakeGateway, Reply
from tests.origin import Origin
from tests.waiting import wait_for

KIB, MIB, GIB = 1024, 1024**2, 1024**3
# What a loopback connection's socket buffers may hold beyond what the reader took.
BUFFERED = 64 * MIB
# Far above a child's own ~90 MiB, far below the gibibyte it was offered.
PEAK_RSS_BOUND = 256 * MIB


class EndlessOrigin:
    """A loopback server answering every GET or POST with `size` bytes of HTML made as they are
    sent, until the client hangs up; `sent` counts the body bytes it managed to write."""

    def __init__(self, *, content_type="text/html; charset=utf-8", announce=False, size=GIB):
        self.content_type, self.announce, self.size = content_type, announce, size
        self.sent = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # clients hang up on purpose
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})

    @property
    def port(self):
        return self._server.server_address[1]

    def url(self, path="/page.html"):
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler_class(self):
        origin = self
        block = b"<p>" + b"x" * (64 * KIB - 8) + b"</p>\n"

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # without a length, the body ends when the connection does

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Type", origin.content_type)
                if origin.announce:
                    self.send_header("Content-Length", str(origin.size))
                self.end_headers()

            def do_GET(self):
                self.do_HEAD()
                written = 0
                try:
                    self.wfile.write(b"<!DOCTYPE html><html><body>\n")
                    while written < origin.size:
                        self.wfile.write(block)
                        written += len(block)
                except OSError:
                    pass  # the client hung up
                finally:
                    with origin._lock:
                        origin.sent += written

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

        return Handler


# --- A download in a child with the kinds' limits ------------------------------------------

CHILD = """
import json, resource, sys
from jobs.runtime.process import child as childside

def main():
    import django
    django.setup()
    from downloads import ytdlp
    from downloads.egress import EgressPolicy
    from downloads.errors import DownloadFailed
    what, url, staging, allowed = sys.argv[1:5]
    policy = EgressPolicy.from_setting(allowed)
    answer = {"data_limit": resource.getrlimit(resource.RLIMIT_DATA)[0]}
    try:
        if what == "list":
            answer["entries"] = len(ytdlp.list_entries(url, policy=policy, retries=0))
        else:
            done = ytdlp.run_download(url, fmt=what, staging_dir=staging, policy=policy, retries=0)
            answer["size_bytes"] = done.size_bytes
    except DownloadFailed as exc:
        answer.update(code=exc.code, limit_bytes=getattr(exc, "limit_bytes", None),
                      detail=str(exc))
    print(json.dumps(answer))

childside.run(main)
"""


@dataclass
class Ran:
    answer: dict | None  # None: the child printed nothing (a limit ended it)
    exit_code: int
    peak_rss_bytes: int  # of the child and the processes it waited for (ffmpeg)
    errors: str


def kind_limits(kind):
    return Limits(**registry.get(kind).policy.options["limits"])


# Linux counts into a process's peak RSS the memory of the process it was forked from (its
# memory up to the exec), so a child of a test process that has grown would report at least
# that. A small launcher forks it instead, and reports its exit and peak on its stderr's last
# line.
LAUNCH = """
import os, sys
pid = os.posix_spawn(sys.executable, [sys.executable, *sys.argv[1:]], os.environ)
_pid, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, file=sys.stderr)
"""


def run_child(what, url, tmp_path, *, limits, allowed, env=None):
    """Run CHILD as the supervisor runs a job's child (limits in its environment); reap it."""
    errors = tmp_path / "child.err"
    with open(errors, "w") as err:
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH, "-c", CHILD, what, url, str(tmp_path / "staging"),
             allowed],
            env=python_env({LIMITS_ENV: limits.to_env(), **(env or {})}),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, check=True)
    said = errors.read_text().splitlines()
    exit_code, peak_kib = (int(word) for word in said[-1].split())
    return Ran(answer=json.loads(done.stdout) if done.stdout.strip() else None,
               exit_code=exit_code, peak_rss_bytes=peak_kib * KIB, errors="\n".join(said[:-1]))


def test_the_kinds_that_run_yt_dlp_or_ffmpeg_cap_their_memory_by_default():
    assert kind_limits("downloads.fetch").data_bytes == 2 * GIB
    assert kind_limits("downloads.edit").data_bytes == 2 * GIB
    assert kind_limits("subscriptions.check").data_bytes == GIB


@pytest.mark.parametrize("raw, expected", [("1G", GIB), ("1.5G", GIB + GIB // 2),
                                           (str(512 * MIB), 512 * MIB), ("0", None)])
def test_the_memory_limit_is_a_size_or_zero_for_none(settings, raw, expected):
    settings.DOWNLOADS_MEMORY_LIMIT = raw
    assert downloads_conf.memory_limit_bytes() == expected


@pytest.mark.parametrize("name, raw, read", [
    ("DOWNLOADS_MEMORY_LIMIT", "lots", downloads_conf.memory_limit_bytes),
    ("DOWNLOADS_MEMORY_LIMIT", "10M", downloads_conf.memory_limit_bytes),
    ("DOWNLOADS_MAX_PAGE_BYTES", "1K", downloads_conf.max_page_bytes),
])
def test_a_limit_nothing_could_run_under_is_refused_with_its_name(settings, name, raw, read):
    setattr(settings, name, raw)
    with pytest.raises(SettingsError, match=name):
        read()


@pytest.mark.dbless
@pytest.mark.slow
@pytest.mark.parametrize("content_type, announce", [
    ("text/html; charset=utf-8", False),  # streamed: refused once the page limit is read
    ("text/html; charset=utf-8", True),  # announced: refused before its body
    ("application/octet-stream", False),  # HTML called a file: the generic extractor reads it whole
])
def test_a_gibibyte_page_is_refused_after_the_page_limit(tmp_path, content_type, announce):
    limits = kind_limits("downloads.fetch")
    with EndlessOrigin(content_type=content_type, announce=announce) as origin:
        ran = run_child("best", origin.url(), tmp_path, limits=limits,
                        allowed=f"127.0.0.1:{origin.port}")
    assert ran.answer is not None, ran.errors
    assert ran.answer["data_limit"] == limits.data_bytes
    assert (ran.answer["code"], ran.answer["limit_bytes"]) == (
        "too_large", downloads_conf.max_page_bytes()), ran.answer
    assert "DOWNLOADS_MAX_PAGE_BYTES" in ran.answer["detail"]
    assert origin.sent < BUFFERED  # it hung up instead of reading the gibibyte
    assert ran.peak_rss_bytes < PEAK_RSS_BOUND < limits.data_bytes
    assert not (tmp_path / "staging").exists()  # nothing of the page is left behind


@pytest.mark.dbless
@pytest.mark.slow
def test_a_subscription_check_reads_a_huge_page_no_further_than_the_limit(tmp_path):
    limits = kind_limits("subscriptions.check")
    with EndlessOrigin() as origin:
        ran = run_child("list", origin.url(), tmp_path, limits=limits,
                        allowed=f"127.0.0.1:{origin.port}")
    assert ran.answer is not None, ran.errors
    assert ran.answer["data_limit"] == limits.data_bytes
    assert ran.answer["code"] == "too_large", ran.answer
    assert origin.sent < BUFFERED
    assert ran.peak_rss_bytes < PEAK_RSS_BOUND


@pytest.mark.dbless
@pytest.mark.slow
@pytest.mark.parametrize("what", ["direct", "hls"])
def test_media_still_downloads_under_the_caps(tmp_path, what):
    limits = kind_limits("downloads.fetch")
    with Origin() as origin:
        if what == "hls":  # remuxed by ffmpeg, which runs under the same limits
            url = origin.add_folder("/hls", media.hls_rendition()) + "index.m3u8"
        else:
            url = origin.add_file("/clip.mp4", media.short_mp4())
        ran = run_child("best", url, tmp_path, limits=limits, allowed=f"127.0.0.1:{origin.port}")
    assert ran.answer is not None and ran.answer.get("size_bytes"), (ran.answer, ran.errors)
    assert ran.answer["data_limit"] == limits.data_bytes
    assert ran.peak_rss_bytes < PEAK_RSS_BOUND


@pytest.mark.dbless
@pytest.mark.slow
def test_the_memory_cap_ends_a_child_whatever_it_reads(tmp_path):
    """With the page limit out of the way, the cap itself stops a child holding a page whole."""
    cap = 512 * MIB
    with EndlessOrigin() as origin:
        ran = run_child("best", origin.url(), tmp_path, limits=Limits(data_bytes=cap),
                        allowed=f"127.0.0.1:{origin.port}",
                        env={"DOWNLOADS_MAX_PAGE_BYTES": "4G"})
    assert ran.exit_code == EXIT_ADDRESS_SPACE, (ran.answer, ran.errors[-2000:])
    assert "resource limit reached" in ran.errors
    assert origin.sent < cap + BUFFERED
    # RSS counts the shared libraries too, which the data limit does not.
    assert ran.peak_rss_bytes < cap + 64 * MIB


# --- The same through the engine --------------------------------------------------------

def child_of(job):
    """The pid of the job's running child (`python -m jobs.runtime.process.main`), or None."""
    marker = f"job-{job.pk}-{job.lease_token}"
    for name in os.listdir("/proc"):
        if name.isdigit() and has_marker(int(name), marker):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                    if b"jobs.runtime.process.main" in cmdline.read():
                        return int(name)
            except OSError:
                pass
    return None


def proc_figures(pid):
    """(peak RSS in bytes, soft data limit in bytes) of a running process, or None once gone."""
    try:
        with open(f"/proc/{pid}/status") as status, open(f"/proc/{pid}/limits") as limits:
            peak = int(re.search(r"^VmHWM:\s+(\d+) kB", status.read(), re.M).group(1)) * KIB
            data = re.search(r"^Max data size\s+(\S+)", limits.read(), re.M).group(1)
    except (OSError, AttributeError):
        return None
    return peak, (None if data == "unlimited" else int(data))


@pytest.mark.once
@pytest.mark.slow
def test_a_gibibyte_page_fails_the_download_and_its_child_stays_small(spawn_worker,  # noqa: F811
                                                                      user, media_root,
                                                                      settings):
    with EndlessOrigin() as origin:
        allowed = f"127.0.0.1:{origin.port}"
        settings.DOWNLOADS_EGRESS_ALLOW = allowed
        download = services.download_submit(owner=user, url=origin.url())
        spawn_worker("--queues", "downloads", env={"MEDIA_ROOT": str(media_root),
                                                   "DOWNLOADS_EGRESS_ALLOW": allowed})
        seen = []

        def watch():
            download.job.refresh_from_db()
            if download.job.status == JobStatus.RUNNING and (pid := child_of(download.job)):
                if (figures := proc_figures(pid)) is not None:
                    seen.append(figures)
            return download.job.status in (JobStatus.FAILED, JobStatus.SUCCESSFUL)

        wait_for(watch, timeout=60, interval=0.02)
    assert (download.job.status, download.job.error_code) == (JobStatus.FAILED, "too_large"), \
        download.job.error
    assert seen, "the child was never seen running"
    # The child sets its limits on itself first thing; the last sighting is long past that.
    assert seen[-1][1] == kind_limits("downloads.fetch").data_bytes
    assert max(peak for peak, _ in seen) < PEAK_RSS_BOUND
    assert origin.sent < BUFFERED


# --- The AI gateway's answer ------------------------------------------------------------------

@pytest.mark.dbless
@pytest.mark.parametrize("announce", [False, True])
def test_a_huge_gateway_answer_fails_unread(settings, announce):
    with EndlessOrigin(content_type="application/json", announce=announce) as gateway:
        settings.INSIGHTS_GATEWAY_URL = gateway.url("/v1")
        tracemalloc.start()
        try:
            with pytest.raises(Fail) as failed:
                generators.generate(InsightKind.SHOT_NOTES, {"index": 0}, language="en")
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert failed.value.code == "answer_too_large"
    assert "1.0\xa0MB" in str(failed.value)
    assert peak < 8 * MIB  # the answer's limit and a chunk, not the gibibyte
    assert gateway.sent < BUFFERED


@pytest.mark.dbless
def test_a_long_answer_within_the_limit_is_read_and_trimmed(settings):
    with FakeGateway() as gateway:
        settings.INSIGHTS_GATEWAY_URL = gateway.url
        gateway.default = Reply(text="Words. " * 100_000)  # 700 kB of JSON
        written = generators.generate(InsightKind.SHOT_NOTES, {"index": 0}, language="en")
    assert len(written.text) == generators.MAX_TEXT_CHARS


@pytest.mark.dbless
def test_the_answer_limit_is_a_setting(settings):
    settings.INSIGHTS_MAX_ANSWER_BYTES = 10 * KIB
    with FakeGateway() as gateway:
        settings.INSIGHTS_GATEWAY_URL = gateway.url
        gateway.default = Reply(text="Words. " * 3000)  # 21 kB
        with pytest.raises(Fail) as failed:
            generators.generate(InsightKind.SHOT_NOTES, {"index": 0}, language="en")
    assert failed.value.code == "answer_too_large"
