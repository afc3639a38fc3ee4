"""The daily backfill: a library overview for every active user, at prefetch priority.

A schedule fires `insights.scheduled.backfill_overviews`, which queues one
`insights.backfill` job; that job walks the active users and asks for each
one's overview. An overview whose data has not changed is not written again
(the request's fingerprint matches), so a quiet library costs one query.
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from insights import conf, data, services
from insights.models import InsightKind


def active_users(now=None):
    """Users who logged in or asked for a download within INSIGHTS_BACKFILL_ACTIVE_DAYS."""
    since = (now or timezone.now()) - timedelta(days=conf.backfill_active_days())
    recent = Q(last_login__gte=since) | Q(downloads__created_at__gte=since)
    return get_user_model().objects.filter(recent, is_active=True).distinct().order_by("pk")


def run(ctx):
    users = list(active_users())
    asked = 0
    for done, user in enumerate(users, 1):
        if ctx.should_stop():
            break
        try:
            services.insight_request(owner=user, kind=InsightKind.LIBRARY_OVERVIEW,
                                     subject=data.LIBRARY, tier="prefetch")
            asked += 1
        except (services.SubjectNotFound, data.SubjectInvalid, data.Unavailable):
            pass  # nothing to say about this user's library (yet)
        except services.TooManyQueued:
            pass  # their queue is full: tomorrow's backfill asks again
        ctx.progress(done / len(users), message=f"{done} of {len(users)} users")
    return {"users": len(users), "requested": asked}
