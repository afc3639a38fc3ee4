from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobsConfig(AppConfig):
    """The engine: one Job table, its lifecycle, workers and transports."""

    name = "jobs"
    verbose_name = _("Jobs")

    def ready(self):
        # Apps declare their kinds in a `handlers` module; importing them here
        # means every process (web and worker) knows every kind's policy.
        from importlib import import_module

        from django.utils.module_loading import autodiscover_modules

        # The backend registers the django.task kind; dbwait hooks new connections; schedules
        # refuses, in every process, a firing of a function no app registered.
        from jobs import backend, checks, conf, notices, schedules  # noqa: F401
        from jobs.engine import dbwait, enqueue, transitions  # noqa: F401

        # The after-end pipeline's upper steps (jobs/engine/transitions.py): running a
        # job again for newer data enqueues it; a failure for good is noticed.
        transitions.wire(run_again=enqueue.run_again, notify_failure=notices.job_failed)

        autodiscover_modules("handlers")
        for module in conf.handler_modules():
            import_module(module)
