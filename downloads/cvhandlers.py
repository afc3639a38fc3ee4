"""The CV fleet's handlers for downloads: run by `manage.py runcvworker` (or the embedded
worker in local mode), with no database. Paths in payloads are relative to MEDIA_ROOT, which
the CV machines share; images go to the job's own folder (ctx.work_dir)."""

from pathlib import Path

from django.conf import settings

from jobs.cv.worker import cv_handler


def _video(payload):
    return Path(settings.MEDIA_ROOT) / payload["file"]


@cv_handler("segment")
def segment(ctx, payload):
    from downloads import cv  # the only module that imports OpenCV, loaded on the CV fleet alone

    return cv.segment(_video(payload), out_dir=ctx.work_dir, report=ctx.progress,
                      should_stop=ctx.should_stop)


@cv_handler("analyze")
def analyze(ctx, payload):
    from downloads import cv

    return cv.analyze(_video(payload), start_s=float(payload["start_s"]),
                      end_s=float(payload["end_s"]), out_dir=ctx.work_dir, report=ctx.progress,
                      should_stop=ctx.should_stop)
