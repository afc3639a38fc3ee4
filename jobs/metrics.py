"""What the queue looks like from outside: counts, latency, durations, heartbeats; and `/metrics`.

One collector reads the database at scrape time, so any web process answers
the same and nothing has to run inside the workers. That choice shapes two
kinds of numbers:

- *State* is read as it is now: jobs by queue and state, the age of the
  longest-waiting runnable job per queue, each live worker's heartbeat age.
- *Flow* (finished jobs by outcome, failures, retries, durations) is read
  from the per-minute rollup (jobs/engine/rollup.py), the same rows the admin's
  dashboard charts, over the whole minutes of the last
  `JOBS_METRICS_WINDOW_SECONDS` (default 600, the current minute included),
  and exposed as gauges and a gauge histogram, not as counters: totals
  computed from the tables would drop whenever `prunejobs` deletes history,
  and Prometheus reads a drop as a counter reset (a false spike in
  `rate()`). Alert on the window values directly, e.g.
  `haulage_recent_job_failures > 10`. Claims are read from the jobs' own
  start times through the indexed states.

Counting stays cheap with millions of finished rows: READY and RUNNING jobs
are counted exactly through their partial indexes; the other states are
counted exactly only while the table is small, and otherwise estimated by
PostgreSQL's planner (SQLite reports them as unknown).
"""

import hmac
from datetime import timedelta

from django.contrib.auth.decorators import login_not_required
from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from jobs import conf
from jobs.engine import rollup
from jobs.models import Queue, Worker
from jobs.runtime import scheduler
from jobs.selectors import standing as selectors
from jobs.selectors.counts import (
    queue_latencies,
    recent_claims,
    recent_failures,
    recent_finished,
    recent_retries,
    state_counts,
)


def durations(since):
    """{kind: ([(bucket upper bound, cumulative count)...], count, sum_s)} of jobs that succeeded
    or failed from the minute of `since` on (the last attempt's run time), from the rollup."""
    result = {}
    for (kind,), totals in rollup.totals(since, by=("kind",)).items():
        if totals.took_count:
            buckets = [(floatToGoString(bound), n) for bound, n in totals.cumulative()]
            result[kind] = (buckets, totals.took_count, totals.took_sum_s)
    return result


def schedule_lateness(now):
    """{schedule name: seconds its next run is overdue (0 when not yet due)}, enabled ones only."""
    from django_q.models import Schedule

    return {
        name or str(pk): max(0.0, (now - next_run).total_seconds()) if next_run else 0.0
        for pk, name, next_run in Schedule.objects.exclude(repeats=0).values_list(
            "pk", "name", "next_run")
    }


def recent_schedule_failures(since):
    """{schedule name: firings that raised within the window} (django-q2 names a firing's group so)."""
    from django_q.models import Failure

    rows = Failure.objects.filter(stopped__gte=since)
    return dict(rows.order_by().values_list("group").annotate(n=Count("pk")))


# --- The collector and the view ---------------------------------------------


class QueueCollector(Collector):
    """Reads the queue's tables at scrape time (see the module's docstring for the choices)."""

    def collect(self):
        now = timezone.now()
        window = conf.JOBS_METRICS_WINDOW_SECONDS
        since = now - timedelta(seconds=window)
        counted_from = rollup.window_start(window, now)  # the rollup's whole minutes
        queue_rows = {row.name: row for row in Queue.objects.all()}

        jobs = GaugeMetricFamily(
            "haulage_jobs", "Jobs by queue and state (finished states may be planner estimates).",
            labels=["queue", "state"])
        for queue, states in state_counts(selectors.queue_names()).items():
            for status, (n, _exact) in states.items():
                if n is not None:
                    jobs.add_metric([queue, status.lower()], n)
        yield jobs

        latency = GaugeMetricFamily(
            "haulage_queue_latency_seconds",
            "How long the longest-waiting runnable job of each queue has waited.", labels=["queue"])
        for queue, seconds in sorted(queue_latencies(now).items()):
            latency.add_metric([queue], seconds)
        yield latency

        paused = GaugeMetricFamily("haulage_queue_paused", "1 while staff have paused the queue.",
                                   labels=["queue"])
        for name, row in sorted(queue_rows.items()):
            paused.add_metric([name], 1 if row.paused else 0)
        yield paused

        beats = GaugeMetricFamily(
            "haulage_worker_heartbeat_age_seconds", "Seconds since each live worker's last heartbeat.",
            labels=["worker", "host"])
        for name, host, beat in Worker.objects.filter(stopped_at__isnull=True).values_list(
            "name", "host", "heartbeat_at"
        ):
            beats.add_metric([name, host], max(0.0, (now - beat).total_seconds()))
        yield beats

        yield GaugeMetricFamily("haulage_recent_window_seconds",
                                "The span the haulage_recent_* metrics describe.", value=window)
        took = GaugeHistogramMetricFamily(
            "haulage_job_duration_seconds",
            "Run time of the last attempt of jobs finished within the recent window, by kind.",
            labels=["kind"])
        for kind, (buckets, _count, total_s) in sorted(durations(counted_from).items()):
            took.add_metric([kind], buckets, gsum_value=total_s)
        yield took
        finished = GaugeMetricFamily(
            "haulage_recent_jobs_finished",
            "Jobs finished within the recent window by queue, kind and outcome (succeeded, "
            "failed, cancelled), and attempts retried.", labels=["queue", "kind", "outcome"])
        for (queue, kind), totals in sorted(recent_finished(counted_from).items()):
            for outcome in rollup.COUNTS:
                finished.add_metric([queue, kind, outcome], getattr(totals, outcome))
        yield finished
        for name, text, values in (
            ("haulage_recent_job_claims", "Jobs started within the recent window, by kind.",
             recent_claims(since)),
            ("haulage_recent_job_failures", "Jobs that failed for good within the recent window.",
             recent_failures(counted_from)),
            ("haulage_recent_job_retries",
             "Attempts within the recent window that failed and were scheduled again, or lost "
             "their lease.", recent_retries(counted_from)),
        ):
            family = GaugeMetricFamily(name, text, labels=["kind"])
            for kind, n in sorted(values.items()):
                family.add_metric([kind], n)
            yield family

        if scheduler.available():
            yield from self.schedules(now, since)

    @staticmethod
    def schedules(now, since):
        late = GaugeMetricFamily(
            "haulage_schedule_overdue_seconds",
            "How far past its time each enabled schedule is; growing means no scheduler is running.",
            labels=["schedule"])
        for name, seconds in sorted(schedule_lateness(now).items()):
            late.add_metric([name], seconds)
        yield late
        failed = GaugeMetricFamily(
            "haulage_recent_schedule_failures",
            "Schedule firings that raised within the recent window.", labels=["schedule"])
        for name, n in sorted(recent_schedule_failures(since).items()):
            failed.add_metric([name or ""], n)
        yield failed


# auto_describe off: registering must not query the database at import time.
registry = CollectorRegistry(auto_describe=False)
registry.register(QueueCollector())


@csrf_exempt  # it only reads; a POST gets require_GET's 405
@login_not_required
@require_GET
@never_cache
def metrics_view(request):
    """Prometheus' text format; with METRICS_TOKEN set, only for `Authorization: Bearer <token>`."""
    token = conf.METRICS_TOKEN.strip()
    if token:
        scheme, _space, given = request.headers.get("Authorization", "").partition(" ")
        # Compared in constant time, so response timing does not leak the token.
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                                 token.encode()):
            response = HttpResponse(_("A valid metrics token is required."), status=401,
                                    content_type="text/plain; charset=utf-8")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
