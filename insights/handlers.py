"""The insight kinds and their policy (imported by every process at start-up).

insights.video_summary     a summary of one video the user holds
insights.shot_notes        notes on one shot of it
insights.library_overview  an overview of the user's whole library
insights.backfill          ask for every active user's overview (the daily schedule)
insights.prefetch          after a CV job succeeded, ask for what its new data feeds: a
                           follow-up of those kinds, decided in the transaction of their
                           success, so a worker dying right after it loses nothing

All three share the `insights` queue, whose global limit and gap (the Queue
row, seeded from INSIGHTS_CONCURRENCY and INSIGHTS_GAP_SECONDS) keep the
gateway to one generation at a time with a pause between them. Attempts are
set per job at enqueue (INSIGHTS_MAX_ATTEMPTS); the cool-down after which a
given-up insight asked for again is tried again is read here, when a process
starts.
"""

from django.utils.translation import gettext_lazy as _

from insights import backfill, conf, services
from insights.models import InsightKind
from jobs.engine.registry import kind


def _unique(payload, owner):
    return f"insight:{payload['insight']}"


def _user_key(payload, owner):
    # One user's burst waits behind its own key, out of the claim index: another user's
    # request is the next one a worker takes.
    return [f"insights-user:{owner.pk}"] if owner is not None else []


def _timeout_s(payload):
    # The gateway's own timeouts end a hung call first; this is the engine's backstop.
    return conf.connect_timeout_s() + conf.read_timeout_s() + 30


POLICY = {
    "queue": conf.QUEUE,
    "priority": conf.PREFETCH,
    "max_attempts": conf.max_attempts(),
    "cooldown_s": conf.retry_after_s(),
    "timeout_s": _timeout_s,
    "unique_key": _unique,
    "concurrency_keys": _user_key,
    "default_limits": {"insights-user": conf.user_concurrency()},
    # The insight keeps its job's final state, so pruning the job loses nothing.
    "finished": services.insight_record_outcome,
}


def generate(ctx, payload):
    return services.insight_generate(ctx, payload["insight"])


for _kind in InsightKind:
    kind(services.job_kind(_kind), label=_kind.label, **POLICY)(generate)


# Not on the insights queue: it only asks for insights, the generations queue there.
@kind("insights.prefetch", label=_("Insight prefetch"), follows=tuple(sorted(services.PREFETCH_AFTER)),
      max_attempts=3)
def prefetch(ctx, payload):
    return services.prefetch_after(payload.get("after"), payload.get("of"), ctx.job.owner)


# Not on the insights queue: it only asks for overviews, the generations queue there.
@kind("insights.backfill", label=_("Insight backfill"), unique_key=lambda payload, owner: "insights.backfill", max_attempts=3)
def backfill_overviews(ctx, payload):
    return backfill.run(ctx)
