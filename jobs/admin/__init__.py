"""The queue's control room in Django's admin: jobs, queues, workers, limits, schedules.

The top of the house: these modules may import anything in `jobs`, and nothing
in `jobs` imports them. Apps built on the engine import the names below.
"""

from jobs.admin.jobs import admin_link, redact, register_job_link, register_progress_words
from jobs.runtime import scheduler

if scheduler.available():
    from jobs.admin import schedules  # noqa: F401  (django-q2's admins, made safe)

__all__ = ["admin_link", "redact", "register_job_link", "register_progress_words"]
