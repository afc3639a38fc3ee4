"""The download path against a plain HTTP copy of the same file. Part of `make bench`.

    .venv/bin/python bench/downloads.py [--quick] [--size-mb 200] [--rate-mb-s 50]

A 200 MB file from a loopback origin (tests/origin.py), throttled to a
realistic rate and unthrottled. For each: a plain streaming HTTP copy, then a
download through the whole path (submit → job → runworker → supervised child
→ yt-dlp → rename into place). Figures:

- steady rate: bytes per second between 10 % and 90 % of the file, from the
  size of the file being written, sampled every few milliseconds (the same
  method for both);
- start-up: from the submit call to the origin receiving the request for the
  file's bytes (what a user waits before anything moves), and to the first
  progress figure a page can show;
- database writes per second during the transfer, counted from PostgreSQL's
  own statement log (`log_statement = mod`): every INSERT, UPDATE and DELETE
  any process sent while the bytes flowed.

Starts its own PostgreSQL and one `manage.py runworker`. Prints a markdown table.
"""

import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.services import start_postgres  # noqa: E402

MB = 1024 * 1024
SAMPLE_S = 0.002
WRITE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \S+ .*?"
                   r"(?:statement|execute [^:]*): (INSERT|UPDATE|DELETE)\b")


class Sampler(threading.Thread):
    """Samples (time, bytes) of whichever file `path()` names, until stopped."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = path
        self.samples = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                size = os.stat(self.path()).st_size
            except (FileNotFoundError, TypeError):
                size = None
            if size:
                self.samples.append((time.time(), size))
            time.sleep(SAMPLE_S)

    def steady_rate(self, total):
        """Bytes/s between 10 % and 90 % of `total`, from the samples."""
        low = next((t, b) for t, b in self.samples if b >= 0.1 * total)
        high = next((t, b) for t, b in self.samples if b >= 0.9 * total)
        return (high[1] - low[1]) / (high[0] - low[0])

    def window(self):
        return self.samples[0][0], self.samples[-1][0]


def plain_copy(url, target):
    """A streaming GET into a file, 1 MiB reads: the yardstick."""
    sampler = Sampler(lambda: target)
    sampler.start()
    host, port = url.split("/")[2].split(":")
    path = "/" + url.split("/", 3)[3]
    connection = http.client.HTTPConnection(host, int(port))
    connection.request("GET", path)
    response = connection.getresponse()
    with open(target, "wb") as file:
        while chunk := response.read(MB):
            file.write(chunk)
    connection.close()
    time.sleep(0.02)
    sampler.done.set()
    sampler.join()
    return sampler


def pg_writes(log_path, start, end):
    count = 0
    for line in Path(log_path).read_text(errors="replace").splitlines():
        match = WRITE.match(line)
        if match:
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            count += start <= at <= end
    return count


def through_haulage(origin, url, owner, media_root, log_path):
    from django.db import connection

    from downloads import progress, services, storage
    from downloads.models import Download

    stamps = []
    record = origin._record
    origin._record = lambda seen: (stamps.append((time.time(), seen)), record(seen))
    found = {}

    def part_file():
        if "path" not in found:
            asset_id = found.get("asset")
            folder = storage.staging_dir(asset_id) if asset_id else None
            parts = list(folder.glob("*.part")) if folder and folder.exists() else []
            if parts:
                found["path"] = parts[0]
        return found.get("path")

    sampler = Sampler(part_file)
    sampler.start()
    submitted = time.time()
    download = services.download_submit(owner=owner, url=url)
    found["asset"] = download.asset_id
    first_progress = None
    while True:
        connection.close()
        row = Download.objects.select_related("job").get(pk=download.pk)
        if first_progress is None and (progress.decode(row.job.progress_message).bytes_done or 0):
            first_progress = time.time()
        if not row.is_live:
            break
        time.sleep(0.01)
    sampler.done.set()
    sampler.join()
    origin._record = record
    if row.current_status != "successful":
        raise RuntimeError(f"the download failed: {row.job.error}")
    gets = [at for at, seen in stamps if seen.method == "GET"]
    start, end = sampler.window()
    return {
        "sampler": sampler,
        "startup_s": gets[-1] - submitted,
        "first_progress_s": (first_progress or end) - submitted,
        "writes": pg_writes(log_path, start, end),
        "transfer_s": end - start,
    }


def setup_django(url, scratch, allow):
    os.environ.update({
        "DATABASE_URL": url, "SECRET_KEY": "bench-only", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
        "HAULAGE_VAR_DIR": str(scratch), "MEDIA_ROOT": str(scratch / "media"),
        "DOWNLOADS_EGRESS_ALLOW": allow, "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    })
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()


def wait_for_worker():
    from django.db import connection

    from jobs.models import Worker

    deadline = time.monotonic() + 60
    while not Worker.objects.filter(stopped_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the worker did not start")
        connection.close()
        time.sleep(0.1)
    time.sleep(1)  # past its first claim round


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 50 MB file, one run each")
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--rate-mb-s", type=float, default=50.0)
    args = parser.parse_args()
    size_mb = 50 if args.quick else args.size_mb
    runs = 1 if args.quick else 3

    from tests import media
    from tests.origin import Origin

    source = media.padded_mp4(size_mb * MB, seed=200)
    total = source.stat().st_size
    rows = []
    with tempfile.TemporaryDirectory(prefix="haulage-bench-") as tmp, Origin() as origin:
        scratch = Path(tmp)
        os.chmod(scratch, 0o755)
        stop_pg, env = start_postgres(scratch)
        worker = None
        try:
            log_path = env["TEST_PG_LOG"]
            import psycopg

            with psycopg.connect(env["TEST_POSTGRES_URL"], autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET log_statement = 'mod'")
                conn.execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] '")
                conn.execute("SELECT pg_reload_conf()")
            setup_django(env["TEST_POSTGRES_URL"], scratch, f"127.0.0.1:{origin.port}")
            from django.contrib.auth import get_user_model

            from downloads.models import DownloadQuota

            owner = get_user_model().objects.create_user("bench")
            DownloadQuota.objects.create(user=owner, unlimited=True)
            worker = subprocess.Popen([sys.executable, "manage.py", "runworker",
                                       "--no-scheduler", "--queues", "downloads"], cwd=ROOT, env=dict(os.environ),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_worker()
            origin.add_file("/big.mp4", source)
            for label, rate in ((f"throttled to {args.rate_mb_s:g} MB/s", args.rate_mb_s * MB),
                                ("unthrottled", None)):
                origin.resources["/big.mp4"].throttle_bytes_s = int(rate) if rate else None
                plain, ours, startup, first, writes, counted = [], [], [], [], [], []
                for run in range(runs):
                    copy = plain_copy(origin.url("/big.mp4"), scratch / "plain.mp4")
                    plain.append(copy.steady_rate(total))
                    (scratch / "plain.mp4").unlink()
                    result = through_haulage(origin, origin.url(f"/big.mp4?run={len(rows)}-{run}"),
                                             owner, scratch / "media", log_path)
                    ours.append(result["sampler"].steady_rate(total))
                    startup.append(result["startup_s"])
                    first.append(result["first_progress_s"])
                    writes.append(result["writes"] / result["transfer_s"])
                    counted.append((result["writes"], result["transfer_s"]))
                    for folder in ("assets", "staging"):
                        subprocess.run(["rm", "-rf", str(scratch / "media" / folder)])
                rows.append((label, statistics.median(plain), statistics.median(ours),
                             statistics.median(startup), statistics.median(first),
                             statistics.median(writes), counted[len(counted) // 2]))
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(30)
            stop_pg()
    print(f"| {size_mb} MB from a loopback origin | plain HTTP copy | through Haulage | ratio "
          "| request → first byte | request → first progress shown | DB writes/s during transfer |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, plain, ours, startup, first, writes, (count, seconds) in rows:
        print(f"| {label} | {plain / MB:,.1f} MB/s | {ours / MB:,.1f} MB/s | {ours / plain:.2f} "
              f"| {startup:.2f} s | {first:.2f} s | {writes:.1f} ({count} in {seconds:.1f} s) |")
    print(f"\nMedian of {runs} run(s) each; one runworker at its defaults; the steady rate is "
          "measured between 10 % and 90 % of the file.")


if __name__ == "__main__":
    main()
