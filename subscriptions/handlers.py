"""The subscriptions app's job kind and its policy (imported by every process at start-up).

subscriptions.check   list a subscription's entries with yt-dlp and request downloads of the
                      new ones, in a supervised child process (yt-dlp runs under the egress
                      guard, which patches the whole process's sockets: never in a worker thread),
                      its memory capped (SUBSCRIPTIONS_CHECK_MEMORY_LIMIT)

One live check per subscription (unique key), and one running check per
user at a time (the `subscriber:<id>` key), so one user's hundred
subscriptions falling due together wait for each other instead of taking
every worker.
"""

from django.utils.translation import gettext_lazy as _

from jobs.engine.registry import kind
from subscriptions import checking, conf, services
from subscriptions.services import CHECK_KIND, check_key


def _unique(payload, owner):
    return check_key(payload["subscription"])


def _keys(payload, owner):
    return [f"subscriber:{owner.pk}"] if owner is not None else []


@kind(
    CHECK_KIND,
    label=_("Subscription check"),
    mode="process",
    queue="subscriptions",
    max_attempts=conf.check_attempts(),
    unique_key=_unique,
    concurrency_keys=_keys,
    default_limits={"subscriber": conf.checks_per_user()},
    finished=services.record_job_failure,
    options={
        "stall_timeout_s": conf.check_stall_timeout_s(),
        "kill_grace_s": conf.check_kill_grace_s(),
        "wall_clock_cap_s": conf.check_wall_clock_cap_s(),
        "limits": {"data_bytes": conf.check_memory_limit_bytes()},  # None: no cap
    },
)
def check_subscription(ctx, payload):
    return checking.run(ctx, payload)
