"""Shot notes: from the click on a shot to its notes shown. Part of `make bench`.

    .venv/bin/python bench/shot_notes.py [--quick] [--repeat 3] [--gap 5] [--db sqlite|postgres]

The video page asks for a shot's notes at interactive priority; here the
same request goes through the JSON API (`POST /api/insights/`), and the clock
runs from it to the first poll of `GET /api/insights/<id>/` that says
"successful" (and, apart, to the first that shows a text). A shot not
analysed yet has its analysis asked for first, on the embedded CV worker, and
the notes wait for it, so both are inside the figure.

Four cases, each with the shot not analysed yet and then analysed:

- the local generator (no gateway: the `insights-local` queue, no single slot,
  no gap), the queue idle, then busy;
- a gateway stand-in on loopback (tests/gateway.py: OpenAI-compatible,
  `--generation-s` an answer) with the `insights` queue's etiquette (one at a
  time, `--gap` between them), the queue idle, then busy.

Busy is what a library backfill leaves: `--backlog` prefetch insights of
other users' videos and `--cv-backlog` analyses of other videos' shots at
normal priority, queued before the click, which comes once the worker runs
both. Idle: nothing queued, and the gateway's queue past its rest.

Starts one real `manage.py runworker` (local CV mode: no REDIS_URL, so
fakeredis and the embedded CV worker) on a throw-away SQLite database (or
PostgreSQL), downloads the sample video (downloads/demo.py) from a loopback
origin under four addresses, which the real segmentation splits into shots,
then clicks. Prints a markdown table.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.downloads import setup_django, wait_for_worker  # noqa: E402
from tests.gateway import FakeGateway, Reply  # noqa: E402
from tests.services import start_postgres  # noqa: E402

# The sample, generated once per machine (downloads.demo.generate keeps what is there).
SAMPLE_DIR = Path(tempfile.gettempdir()) / "haulage-bench" / "demo"
VIDEOS = 4  # the sample under this many addresses: four assets, four shots each
NEIGHBOURS = 8  # other users holding every video: their prefetch insights are the backlog
POLL_S = 0.05
DEADLINE_S = 120
STARTED = time.monotonic()


@dataclass
class Click:
    text_s: float  # click → the first poll that shows a text
    shown_s: float  # click → the first poll that says "successful"
    analysis_s: float | None  # click → the shot's analysis done (None: it had one)
    runs: int  # generations of the notes the click led to
    from_analysis: bool  # the notes were written from the analysis, not without it


# --- The library -------------------------------------------------------------------


def wait_until(predicate, what, timeout_s=DEADLINE_S):
    from django.db import connection

    deadline = time.monotonic() + timeout_s
    while True:
        connection.close()  # a fresh read each time (SQLite: no stale snapshot)
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s} s")
        time.sleep(POLL_S)


def build_library(origin_url):
    """The viewer's four videos, downloaded and split into shots; neighbours hold them too.

    Returns (viewer, neighbours, the four assets, the viewer's first)."""
    from django.contrib.auth import get_user_model

    from downloads import services
    from downloads.models import Download, DownloadQuota, MediaAsset, Shot
    from jobs.models import Job

    users = get_user_model().objects
    viewer = users.create_user("viewer")
    neighbours = [users.create_user(f"neighbour{n}") for n in range(NEIGHBOURS)]
    for user in (viewer, *neighbours):
        DownloadQuota.objects.create(user=user, unlimited=True)
    urls = [f"{origin_url}/sample.mp4" + (f"?copy={n}" if n else "") for n in range(VIDEOS)]
    for url in urls:
        services.download_submit(owner=viewer, url=url)
    wait_until(lambda: Download.objects.successful().count() == VIDEOS, "the downloads")
    assets = list(MediaAsset.objects.order_by("pk"))
    wait_until(lambda: Shot.objects.filter(asset__in=assets).values("asset").distinct().count()
               == VIDEOS and not Job.objects.live().exists(), "the shots")
    for user in neighbours:
        for url in urls:
            services.download_submit(owner=user, url=url)  # ready: finished from the cache
    return viewer, neighbours, assets


# --- Before each click ----------------------------------------------------------------


def settle(shot, *, analysed):
    """An idle site: what the last click left queued or running cancelled, every insight
    forgotten (the next request is a first one), the gateway's queue past its rest."""
    from downloads.models import Shot
    from insights import conf
    from insights.models import Insight
    from jobs import services as jobs
    from jobs.exceptions import IllegalTransition
    from jobs.models import Job

    def idle():
        for job in Job.objects.live():
            try:
                jobs.cancel(job, reason="bench: settling between clicks")
            except IllegalTransition:
                pass  # ended meanwhile
        return not Job.objects.live().exists()

    wait_until(idle, "the queue to settle")
    Insight.objects.all().delete()
    if not analysed:
        # The shot as segmentation left it: its next notes ask for its analysis first.
        Shot.objects.filter(pk=shot.pk).update(analysis=None)
    # The rest the last generation left is waited out (an idle queue is past it): ended now.
    jobs.set_queue(conf.QUEUE, rests_until=None)


def between_polls():
    """On SQLite a worker learns of a click on an idle site at its next poll, half a poll away
    on average; it polled as the site went idle, so the click comes half a poll later."""
    from jobs import conf

    time.sleep(conf.JOBS_POLL_SECONDS / 2)


def queue_backlog(neighbours, assets, other_shots, size, cv_size):
    """A backfill's leftovers: up to `size` prefetch insights and `cv_size` analyses at normal
    priority. Returns how many insights it queued, once the worker has started on both."""
    from downloads import shots
    from insights import services as insights
    from insights.models import Insight
    from jobs.models import Job

    asked = set()
    for user in neighbours:
        for asset in assets:
            if len(asked) < size:
                asked.update(i.pk for i in insights.insights_prefetch(user, asset_id=asset.pk))
    analyses = [shots.shot_analyze(shot, owner=neighbours[0], check_transport=False).pk
                for shot in other_shots[:cv_size]]
    generations = list(Insight.objects.filter(pk__in=asked).values_list("job", flat=True))
    for what, ids in (("generations", generations), ("analyses", analyses)):
        wait_until(lambda ids=ids: Job.objects.filter(pk__in=ids, started_at__isnull=False).exists(),
                   f"the backlog's {what} to start")
    return len(generations)


# --- The click --------------------------------------------------------------------


def click(client, shot, gateway):
    """Ask for the shot's notes as the page does and poll until they are shown."""
    from django.db import connection

    from downloads.models import Shot
    from insights.models import Insight
    from jobs.models import Job

    had_analysis = Shot.objects.get(pk=shot.pk).analysis is not None
    seen = len(gateway.requests)
    clicked_at, started = time.time(), time.monotonic()
    response = client.post("/api/insights/", {"kind": "shot_notes", "subject": shot.pk},
                           content_type="application/json")
    if response.status_code != 202:
        raise RuntimeError(f"the request answered {response.status_code}: {response.content!r}")
    url, text_s = response["Location"], None
    while True:
        connection.close()
        state = client.get(url).json()
        took_s = time.monotonic() - started
        if state["text"] and text_s is None:
            text_s = took_s
        if state["status"] == "successful":
            break
        if state["status"] in ("failed", "cancelled"):
            raise RuntimeError(f"the notes ended {state['status']}: {state['error']}")
        if took_s > DEADLINE_S:
            raise RuntimeError(f"the notes were not shown within {DEADLINE_S} s: {state}")
        time.sleep(POLL_S)
    notes = Insight.objects.get(pk=state["id"])
    analysis_s = None
    if not had_analysis:
        analysed = Shot.objects.select_related("analysis_job").get(pk=shot.pk).analysis_job
        analysis_s = analysed.finished_at.timestamp() - clicked_at
    runs = Job.objects.filter(kind="insights.shot_notes", unique_key=f"insight:{notes.pk}").count()
    return Click(text_s, took_s, analysis_s, runs, _from_analysis(notes, gateway.requests[seen:]))


def _from_analysis(notes, requests):
    """Whether the text was written from the shot's measurements."""
    if notes.generator == "local":
        return "not been analysed" not in notes.text
    facts = [seen.facts for seen in requests if seen.facts and "video_title" in seen.facts]
    return bool(facts) and all(f.get("analysis") for f in facts)


# --- The cases --------------------------------------------------------------------


def run_case(client, library, gateway, *, busy, repeat, args):
    """`repeat` clicks on a shot not analysed, each followed by one on it analysed."""
    _viewer, neighbours, assets, shot, other_shots = library
    clicks, backlog = {False: [], True: []}, set()
    for _ in range(repeat):
        for analysed in (False, True):
            settle(shot, analysed=analysed)
            if busy:
                backlog.add(queue_backlog(neighbours, assets, other_shots, args.backlog,
                                          args.cv_backlog))
            else:
                between_polls()
            clicks[analysed].append(click(client, shot, gateway))
            log_progress(clicks[analysed][-1])
    return clicks, backlog


def log_progress(done):
    print(f"{time.monotonic() - STARTED:6.1f} s  {done}", file=sys.stderr, flush=True)


def start_worker(log, gateway_url=""):
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--no-scheduler"], cwd=ROOT,
        env={**os.environ, "INSIGHTS_GATEWAY_URL": gateway_url},
        stdout=subprocess.DEVNULL, stderr=log)
    wait_for_worker()
    return worker


def stop_worker(worker):
    worker.terminate()
    worker.wait(60)


def warm_up(shot):
    """One analysis, so the embedded CV worker a runworker starts has its models loaded."""
    from downloads import shots
    from jobs.models import Job

    job = shots.shot_analyze(shot, check_transport=False)
    wait_until(lambda: not Job.objects.get(pk=job.pk).is_live, "the warm-up analysis")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one click of each")
    parser.add_argument("--repeat", type=int, default=3, help="clicks per case and shot state")
    parser.add_argument("--gap", type=float, default=5.0,
                        help="the gateway queue's gap in seconds (the product's default, 20, "
                             "makes this part take about six minutes)")
    parser.add_argument("--generation-s", type=float, default=1.5,
                        help="how long the gateway stand-in takes to answer")
    parser.add_argument("--backlog", type=int, default=40, help="prefetch insights queued when busy")
    parser.add_argument("--cv-backlog", type=int, default=8,
                        help="analyses of other shots queued when busy")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat

    from downloads import demo

    for name in ("REDIS_URL", "INSIGHTS_GATEWAY_URL"):
        os.environ.pop(name, None)  # local CV mode; the gateway is named per worker below
    os.environ.update({"INSIGHTS_GAP_SECONDS": str(args.gap), "INSIGHTS_CONCURRENCY": "1"})
    with tempfile.TemporaryDirectory(prefix="haulage-bench-") as tmp, FakeGateway() as gateway:
        scratch = Path(tmp)
        os.chmod(scratch, 0o755)
        gateway.default = Reply(delay_s=args.generation_s)
        origin = demo.serve(("127.0.0.1", 0), SAMPLE_DIR)
        stop_pg = None
        log_path = scratch / "worker.log"
        try:
            if args.db == "postgres":
                stop_pg, env = start_postgres(scratch)
                url = env["TEST_POSTGRES_URL"]
            else:
                url = f"sqlite:///{scratch / 'bench.sqlite3'}"
            setup_django(url, scratch, f"127.0.0.1:{origin.server_address[1]}")
            demo.generate(SAMPLE_DIR)
            with open(log_path, "w") as log:
                results = measure(args, repeat, gateway, origin, log)
        except Exception:
            if log_path.exists():
                sys.stderr.write("the worker's log ends:\n" + log_path.read_text()[-4000:])
            raise
        finally:
            origin.shutdown()
            origin.server_close()
            if stop_pg is not None:
                stop_pg()
    print_table(results, args, repeat)


def measure(args, repeat, gateway, origin, log):
    """Every case on one library: the local generator's first, then the gateway's (its
    worker started with the gateway's address, as a deployment would)."""
    from django.test import Client

    from downloads.models import Shot

    worker = start_worker(log)
    try:
        viewer, neighbours, assets = build_library(f"http://127.0.0.1:{origin.server_address[1]}")
        shot = Shot.objects.get(asset=assets[0], index=1)
        other_shots = list(Shot.objects.filter(asset__in=assets[1:]).order_by("index", "asset"))
        library = (viewer, neighbours, assets, shot, other_shots)
        client = Client(SERVER_NAME="localhost")
        client.force_login(viewer)
        results = []
        for generator in ("local", "gateway"):
            if generator == "gateway":
                settle(shot, analysed=True)  # the backlog left running, cancelled
                stop_worker(worker)
                worker = start_worker(log, gateway.url)
                warm_up(other_shots[-1])
                os.environ["INSIGHTS_GATEWAY_URL"] = gateway.url  # requests go to its queue now
            for busy in (False, True):
                clicks, backlog = run_case(client, library, gateway, busy=busy, repeat=repeat,
                                           args=args)
                results.append((generator, busy, backlog, clicks))
        return results
    finally:
        stop_worker(worker)


def print_table(results, args, repeat):
    print("| generator | queue | shot | click → notes successful, median | max "
          "| click → a text shown, median | of which the analysis, median "
          "| generations per click | written from the analysis |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for generator, busy, backlog, clicks in results:
        label = (f"gateway stand-in ({args.generation_s:g} s an answer), queue 1 at a time, "
                 f"**{args.gap:g} s gap**" if generator == "gateway" else "local (no gateway)")
        queue = "idle"
        if busy:
            queued = "–".join(str(n) for n in sorted({min(backlog), max(backlog)}))
            queue = f"busy: {queued} prefetch insights, {args.cv_backlog} analyses"
        for analysed in (False, True):
            done = clicks[analysed]
            shown = [c.shown_s for c in done]
            analysis = [c.analysis_s for c in done if c.analysis_s is not None]
            print(f"| {label} | {queue} | {'analysed' if analysed else 'not analysed'} "
                  f"| {statistics.median(shown):.2f} s | {max(shown):.2f} s "
                  f"| {statistics.median(c.text_s for c in done):.2f} s "
                  f"| {f'{statistics.median(analysis):.2f} s' if analysis else '—'} "
                  f"| {', '.join(str(c.runs) for c in done)} "
                  f"| {sum(c.from_analysis for c in done)}/{len(done)} |")
    print(f"\n- {repeat} click(s) of each on {args.db}, through the JSON API, polled every "
          f"{POLL_S * 1000:.0f} ms (the page polls every second: add up to one). One runworker "
          "at its defaults, CV on its embedded worker (local mode).")
    print("- Busy: prefetch insights of other users' videos (library overviews, video summaries) "
          "and analyses of other videos' shots at normal priority, queued before the click and "
          "running.")
    print(f"- The gateway's queue rests {args.gap:g} s here; the product's default is 20 s: add "
          "the difference to each rest a click waits for.")
    print("- More than one generation per click: the first text is shown, marked as updating, "
          "until the last is written.")


if __name__ == "__main__":
    main()
