"""Where the time goes: cProfile of enqueue and of the worker per job (docs/performance.md).

    .venv/bin/python bench/profiling.py [--jobs 2000] [--top 25] [--part enqueue|bulk|worker|all]

Starts its own PostgreSQL. `enqueue` profiles Tasks-API enqueues one by one
(autocommit, then inside one transaction); `bulk` times each step of bulk
enqueue in batches of 1,000 (no profiler: its steps are few and long);
`worker` runs one in-process `Worker` in burst mode over a bulk-enqueued
backlog of no-op tasks with py-spy sampling every thread (cProfile sees one
thread at a time), and counts the SQL statements it sends per job. cProfile's
figures are seconds under the profiler (slower than without it): read them as
shares, not rates.
"""

import argparse
import cProfile
import io
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.services import start_postgres  # noqa: E402


def setup_django(url, scratch):
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "project.settings", "DATABASE_URL": url,
        "SECRET_KEY": "bench-only", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
        "HAULAGE_VAR_DIR": str(scratch), "LOG_LEVEL": "WARNING",
    })
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)


def report(profile, title, jobs, top):
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    print(f"\n### {title}: {stats.total_tt:.2f} s under the profiler, "
          f"{stats.total_tt / jobs * 1e6:.0f} us per job\n")
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    print("\n".join(lines[start:]))


def profile_enqueue(jobs, top):
    from django.db import transaction

    from bench.handlers import noop_task

    noop_task.enqueue()  # warm: imports, the first connection, compiled queries
    for title, atomic in [("enqueue one by one, autocommit", False),
                          ("enqueue one by one, in one transaction", True)]:
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        if atomic:
            with transaction.atomic():
                for _ in range(jobs):
                    noop_task.enqueue()
        else:
            for _ in range(jobs):
                noop_task.enqueue()
        profile.disable()
        took = time.perf_counter() - started
        print(f"\n{title}: {jobs / took:,.0f} jobs/s under the profiler")
        report(profile, title, jobs, top)


def time_bulk(jobs):
    """Microseconds per job of each step of `services.enqueue_many`, medians over batches of 1,000."""
    import statistics

    from django.db import transaction

    from jobs import conf, services
    from jobs.backend import KIND
    from jobs.engine import limits, queries

    read_once = {"payload": {"max_depth": conf.JOBS_MAX_PAYLOAD_DEPTH,
                             "max_bytes": conf.JOBS_MAX_PAYLOAD_BYTES},
                 "attempts": conf.JOBS_DEFAULT_MAX_ATTEMPTS}
    specs = [(KIND, {"task": "bench.handlers.noop_task", "takes_context": False, "args": [i],
                     "kwargs": {}}, {}) for i in range(1000)]
    services.enqueue_many(specs)  # warm
    steps = {"resolve": [], "limits": [], "write": [], "commit": [], "enqueue_many": []}
    for _ in range(max(1, jobs // 1000)):
        marks = [time.perf_counter()]
        batch = [services.resolve(kind, payload, **options, _limits=read_once)
                 for kind, payload, options in specs]
        marks.append(time.perf_counter())
        limits.ensure(batch)
        with transaction.atomic():
            limits.park_at_enqueue(batch)
            marks.append(time.perf_counter())
            queries.insert_many(batch)
            marks.append(time.perf_counter())
        marks.append(time.perf_counter())
        services.enqueue_many(specs)
        marks.append(time.perf_counter())
        for name, began, ended in zip(steps, marks[:-1], marks[1:], strict=True):
            steps[name].append((ended - began) / len(specs) * 1e6)
    print(f"\n### Bulk enqueue, per job (medians of {len(steps['resolve'])} batches of 1,000)\n")
    print("| step | us |\n| --- | ---: |")
    for name, samples in steps.items():
        print(f"| {name} | {statistics.median(samples):.1f} |")
    print(f"\nenqueue_many: {1e6 / statistics.median(steps['enqueue_many']):,.0f} jobs/s")


class StatementCounter:
    """Counts the SQL statements every thread of this process sends, by their first words."""

    def __init__(self):
        from collections import Counter

        self.counts = Counter()
        self.lock = threading.Lock()

    def install(self):
        from django.db.backends import utils

        original = self.original = utils.CursorWrapper._execute
        counter = self

        def counted(cursor, sql, params, *ignored):
            words = " ".join(str(sql).split()[:3])[:40]
            with counter.lock:
                counter.counts[f"{threading.current_thread().name}: {words}"] += 1
            return original(cursor, sql, params, *ignored)

        utils.CursorWrapper._execute = counted

    def uninstall(self):
        from django.db.backends import utils

        utils.CursorWrapper._execute = self.original


class ThreadCPU:
    """CPU seconds each kind of thread spent, summed by thread name (measured as each ends)."""

    def __init__(self):
        from collections import Counter

        self.seconds = Counter()
        self.lock = threading.Lock()

    def install(self):
        run = self.run = threading.Thread.run
        totals = self

        def measured(thread):
            try:
                run(thread)
            finally:
                with totals.lock:
                    totals.seconds[thread.name.split(" ")[0]] += time.thread_time()

        threading.Thread.run = measured

    def uninstall(self):
        threading.Thread.run = self.run


def profile_worker(jobs, top):
    """One in-process Worker in burst mode; py-spy samples every thread (cProfile sees one)."""
    from jobs import services
    from jobs.backend import KIND
    from jobs.engine import dbwait
    from jobs.runtime.worker import Worker

    dbwait.stop_spinning()  # as runworker does: its threads share the cores
    path = "bench.handlers.noop_task"
    services.enqueue_many([(KIND, {"task": path, "takes_context": False, "args": [],
                                   "kwargs": {}}, {})] * jobs)
    raw = Path(tempfile.mkdtemp(prefix="haulage-pyspy-")) / "stacks.txt"
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                            str(os.getpid()), "--rate", "250", "--format", "raw", "--output",
                            str(raw), "--nonblocking"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    counter = StatementCounter()
    counter.install()
    thread_cpu = ThreadCPU()
    thread_cpu.install()
    from jobs import services as services_module
    from jobs.engine import claiming

    calls = {}

    def timed(module, name):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            result = original(*args, **kwargs)
            entry = calls.setdefault(name, [0, 0.0, 0])
            entry[0] += 1
            entry[1] += time.perf_counter() - began
            entry[2] += len(result or ())
            return result

        setattr(module, name, wrapper)
        return original

    originals = [(claiming, "claim", timed(claiming, "claim")),
                 (services_module, "complete_many", timed(services_module, "complete_many"))]
    started, cpu = time.perf_counter(), time.process_time()
    main_cpu = time.thread_time()
    Worker(burst=True, queues=["default"]).run()
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    thread_cpu.seconds["MainThread (claims)"] += time.thread_time() - main_cpu
    thread_cpu.uninstall()
    counter.uninstall()
    for module, name, original in originals:
        setattr(module, name, original)
    spy.send_signal(signal.SIGINT)
    spy.wait(30)
    print(f"\nworker: {jobs / took:,.0f} jobs/s with py-spy attached ({took:.2f} s); "
          f"this process's CPU: {cpu / jobs * 1e6:.0f} us per job, {cpu / took:.0%} of one core")
    print("\n### Batches\n")
    for name, (count, seconds, rows) in calls.items():
        print(f"{name}: {count} calls, {seconds / count * 1e3:.2f} ms each, {rows / count:.1f} jobs "
              f"each, {seconds / took:.0%} of the wall time")
    print("\n### CPU per job, by thread (us)\n")
    for name, seconds in sorted(thread_cpu.seconds.items(), key=lambda item: -item[1]):
        print(f"{seconds / jobs * 1e6:8.0f}  {name}")
    print(f"\n### SQL statements per job ({sum(counter.counts.values()) / jobs:.2f} in all)\n")
    for what, count in counter.counts.most_common(top):
        print(f"{count / jobs:8.3f}  {what}")
    print_samples(raw, top)


def print_samples(raw, top):
    """Top functions by samples (on CPU) in py-spy's raw output: total (on the stack) and self."""
    from collections import Counter

    total, own, samples = Counter(), Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame.split(" (")[0] + " (" + frame.split(" (")[1].split(":")[0].replace(
            str(ROOT) + "/", "").split("site-packages/")[-1] + ")" if " (" in frame else frame
                  for frame in stack.split(";")[1:]]  # the first frame is the thread
        n = int(count)
        samples += n
        for frame in set(frames):
            total[frame] += n
        if frames:
            own[frames[-1]] += n
    print(f"\n### py-spy: {samples} samples on CPU; share of them per function\n")
    print("| function | on the stack | itself |")
    print("| --- | ---: | ---: |")
    for frame, n in total.most_common(top):
        print(f"| `{frame}` | {n / samples:.0%} | {own[frame] / samples:.0%} |")
    print("\nBy time in the function itself:\n")
    for frame, n in own.most_common(top):
        print(f"| `{frame}` | {total[frame] / samples:.0%} | {n / samples:.0%} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--part", choices=["enqueue", "bulk", "worker", "all"], default="all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="haulage-profile-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        stop, env = start_postgres(root)
        try:
            setup_django(env["TEST_POSTGRES_URL"], root)
            if args.part in ("enqueue", "all"):
                profile_enqueue(args.jobs, args.top)
            if args.part in ("bulk", "all"):
                time_bulk(args.jobs)
            if args.part in ("worker", "all"):
                from django.db import connection

                with connection.cursor() as cursor:
                    cursor.execute("TRUNCATE jobs_job CASCADE")
                profile_worker(args.jobs, args.top)
        finally:
            from django.db import connections

            connections.close_all()
            stop()


if __name__ == "__main__":
    main()
