"""Shots: splitting a video asset into shots and measuring each one on the CV fleet.

Two `redis`-mode kinds on the "cv" queue (declared in downloads/handlers.py,
run by downloads/cvhandlers.py on a CV worker):

    downloads.segment   one asset  → its Shot rows and a thumbnail each
    downloads.analyze   one shot   → its measurements (brightness, motion, colours, a strip)

A CV worker writes its result document (downloads.cv's shapes) and images
under MEDIA_ROOT/cv/<job id>/; the engine hands the document to `*_ingest`
inside the transaction that completes the job, so the rows and the job's
success are one commit. Shots belong to the asset, so everyone who holds it
shares them, and finding them again replaces them for everyone, deleting the
analyses and notes made on them: so a holder may do it only while no other
holder has such results on them (`others_hold_results`), checked when it is
asked for and again when the new shots arrive.
"""

import logging
import shutil
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

import jobs
from downloads import conf, cvresults, selectors
from downloads.models import Download, DownloadStatus, MediaAsset, Shot
from downloads.services import lock_owner
from jobs.exceptions import Fail, IllegalTransition
from jobs.models import JobStatus
from jobs.selectors import standing as job_selectors

log = logging.getLogger(__name__)

SEGMENT_KIND = "downloads.segment"
ANALYZE_KIND = "downloads.analyze"
CV_KINDS = (SEGMENT_KIND, ANALYZE_KIND)


SHOTS_IN_USE = gettext_lazy(
    "Someone else who downloaded this video has notes or analyses on its shots: finding the "
    "shots again would delete them, so the shots stay as they are.")


class ShotsInUse(IllegalTransition):
    """Finding an asset's shots again would delete results another holder has on them."""

    code = "shots_in_use"

    def __init__(self):
        super().__init__(str(SHOTS_IN_USE))


def _folder(job_id):
    return f"cv/{int(job_id)}"


# --- Services --------------------------------------------------------------------

def _check_transport(kind):
    # Imported here: the Redis client library is only needed when a request asks.
    from jobs.cv.monitor import check_transport

    check_transport(kind)


class CVQueueFull(Exception):
    """The user already has as many CV jobs queued, running or paused as their quota allows."""

    def __init__(self, limit):
        self.limit = limit
        super().__init__(_("You already have %(n)d shot detections and analyses queued or "
                           "running; wait for some to finish.") % {"n": limit})


def _cv_options(owner, unique_key, *, capped):
    """The enqueue options of a CV job for `owner`: the user's key its quota's limit (for a key
    without a row yet). `capped` (a request, not the engine's own follow-up) refuses a new job
    past the quota's queued cap with CVQueueFull; one merging into its live job is not new.
    The caller holds the owner's lock."""
    if owner is None:
        return {}
    quota = selectors.quota_for(owner)
    if capped and not quota.unlimited and jobs.owner_at_cap(
            owner, CV_KINDS, quota.max_queued_cv, unique_key=unique_key):
        raise CVQueueFull(quota.max_queued_cv)
    return {"owner": owner, "limits": {quota.cv_key: quota.cv_limit}}


def asset_segment(asset, *, owner=None, check_transport=True, after=None, capped=True):
    """Queue (again) the split of a ready video into shots; returns the job.

    A request (`check_transport`) is refused with TransportUnavailable while
    the CV queue's Redis does not answer; the engine's own follow-ups skip the
    check, and their job waits for Redis instead. `after`: the job that made
    the file, which this one waits for (and runs after however it ends: the
    file is there). `capped`: refused with CVQueueFull past the owner's cap.
    """
    if check_transport:
        _check_transport(SEGMENT_KIND)  # before any lock: it is a network round trip
    with transaction.atomic():
        if owner is not None:
            lock_owner(owner)
        # The asset's row lock orders this against housekeeping's eviction:
        # either the job is queued first (and eviction sees it and keeps the
        # file), or the file is gone first and this refuses.
        ready = _lock_ready(asset)
        if ready is None or not ready.is_video:
            raise IllegalTransition(_("Only a finished video can be split into shots."))
        if others_hold_results(ready.pk, owner.pk if owner is not None else None):
            raise ShotsInUse()
        options = _cv_options(owner, f"segment:{ready.pk}", capped=capped)
        job = jobs.enqueue(SEGMENT_KIND, {"asset": ready.pk, "file": ready.file}, **options,
                           depends_on=[after] if after is not None else None,
                           on_dependency_failure="run")
        MediaAsset.objects.filter(pk=ready.pk).update(segment_job=job)
    return job


def _lock_ready(asset):
    return MediaAsset.objects.select_for_update().filter(
        pk=asset.pk, state=MediaAsset.State.READY).first()


# What other apps make from shots, each a function (shot ids, owner ids query) -> whether
# those owners hold any: registered by those apps (insights' notes), which depend on this
# one, never the reverse.
SHOT_RESULTS = []


def others_hold_results(asset_id, owner_id):
    """Whether a holder of the asset other than user `owner_id` has results on its shots: an
    analysis they asked for, or what another app made from one (notes, SHOT_RESULTS)."""
    shot_ids = list(Shot.objects.filter(asset_id=asset_id).values_list("pk", flat=True))
    if not shot_ids:
        return False
    others = Download.objects.filter(asset_id=asset_id).exclude(owner_id=owner_id).values("owner_id")
    analysed = Shot.objects.filter(pk__in=shot_ids, analysis__isnull=False,
                                   analysis_job__owner_id__in=others)
    return analysed.exists() or any(holds(shot_ids, others) for holds in SHOT_RESULTS)


def asset_segment_if_wanted(asset_id, *, owner=None, after=None):
    """In the transaction that made a video ready (by job `after`): queue its split into shots,
    to start once that job has ended, unless a setting turned that off."""
    asset = MediaAsset.objects.get(pk=asset_id)
    if conf.segment_automatically() and asset.is_video and asset.segment_job_id is None:
        asset_segment(asset, owner=owner, check_transport=False, after=after, capped=False)


def shot_analyze(shot, *, owner=None, check_transport=True, priority=None):
    """Queue the measurement of one shot (at most one live job per shot); returns the job.

    Refused with TransportUnavailable as `asset_segment` is, and with CVQueueFull past the
    owner's cap. `priority` raises a live job that was queued lower (never lowers one).
    """
    if check_transport:
        _check_transport(ANALYZE_KIND)
    with transaction.atomic():
        if owner is not None:
            lock_owner(owner)
        asset = _lock_ready(shot.asset)  # against eviction, as in asset_segment
        if asset is None:
            raise IllegalTransition(_("The video file is gone; download it again to analyse it."))
        options = _cv_options(owner, f"analyze:{shot.pk}", capped=True)
        job = jobs.enqueue(ANALYZE_KIND, {
            "shot": shot.pk, "asset": asset.pk, "file": asset.file,
            "start_s": shot.start_s, "end_s": shot.end_s}, **options, priority=priority)
        Shot.objects.filter(pk=shot.pk).update(analysis_job=job)
    return job


def shots_analyze_all(asset, *, owner=None):
    """Queue the shots of the asset not measured yet, in order, at most
    DOWNLOADS_SHOTS_PER_REQUEST and no more than the owner's CV cap leaves room for; returns
    how many were queued. Raises CVQueueFull when the cap left room for none."""
    _check_transport(ANALYZE_KIND)
    queued = 0
    for shot in asset.shots.select_related("asset", "analysis_job").order_by("index"):
        if queued >= conf.shots_per_request():
            break
        live = shot.analysis_job is not None and shot.analysis_job.is_live
        if shot.analysis is None and not live:
            try:
                shot_analyze(shot, owner=owner, check_transport=False)
            except CVQueueFull:
                if not queued:
                    raise
                break
            queued += 1
    return queued


def segment_ingest(job, data):
    """The segment result becomes the asset's Shot rows (replacing older ones)."""
    try:
        cvresults.validate({**data, "version": cvresults.RESULT_VERSION})
    except cvresults.ResultInvalid as exc:
        log.error("segment job %s returned an unusable result: %s", job.pk, exc)
        return {"invalid": str(exc)}
    asset_id = job.payload["asset"]
    asset = MediaAsset.objects.select_for_update().filter(pk=asset_id).first()
    if asset is None or (asset.segment_job_id not in (None, job.pk)
                         and asset.segment_job_id > job.pk):
        return {"stale": True}  # a newer segmentation was asked for meanwhile
    if others_hold_results(asset_id, job.owner_id):
        # Another holder's notes or analyses came while this ran: theirs stay, these go.
        _discard_folders({str(job.pk)})
        raise Fail(str(SHOTS_IN_USE), code=ShotsInUse.code)
    asset_forget_shots(asset_id, keep=job.pk)
    folder = _folder(job.pk)
    Shot.objects.bulk_create(Shot(
        asset_id=asset_id, index=shot["index"], start_s=shot["start_s"], end_s=shot["end_s"],
        start_frame=shot["start_frame"], end_frame=shot["end_frame"],
        thumbnail=f"{folder}/{shot['thumbnail']}") for shot in data["shots"])
    MediaAsset.objects.filter(pk=asset_id).update(segment_job_id=job.pk)
    return {"shots": len(data["shots"]), "duration_s": data["duration_s"], "fps": data["fps"]}


def analyze_ingest(job, data):
    """The analysis result is stored on its shot (if the shot still exists)."""
    try:
        cvresults.validate({**data, "version": cvresults.RESULT_VERSION})
    except cvresults.ResultInvalid as exc:
        log.error("analyze job %s returned an unusable result: %s", job.pk, exc)
        return {"invalid": str(exc)}
    analysis = {key: data[key] for key in ("duration_s", "brightness", "motion", "colors")}
    analysis.update({key: data.get(key) for key in ("motion_mean", "fps", "frame_count")})
    analysis["keyframe_strip"] = f"{_folder(job.pk)}/{data['keyframe_strip']}"
    updated = Shot.objects.filter(pk=job.payload["shot"]).update(analysis=analysis,
                                                                 analysis_job_id=job.pk)
    return {"shot": job.payload["shot"], "stored": bool(updated),
            "brightness": data["brightness"], "motion_mean": data.get("motion_mean")}


def asset_forget_shots(asset_id, *, keep=None):
    """Delete an asset's shots, and their images (cv/<job id>/) once this commits; `keep` is
    the folder of the segmentation replacing them (an ingest run twice must not lose it)."""
    old = list(Shot.objects.filter(asset_id=asset_id).values_list("thumbnail", "analysis_job_id"))
    Shot.objects.filter(asset_id=asset_id).delete()
    stale = {thumb.split("/")[1] for thumb, _ in old if thumb.count("/") > 1}
    stale |= {str(job_id) for _, job_id in old if job_id}
    stale.discard(str(keep))
    transaction.on_commit(lambda: _discard_folders(stale))


def _discard_folders(job_ids):
    for job_id in job_ids:
        if job_id.isdigit():
            shutil.rmtree(Path(settings.MEDIA_ROOT) / "cv" / job_id, ignore_errors=True)


# --- Read paths -------------------------------------------------------------------

def shot_of(user, shot_id):
    """The shot, if the user holds its asset (a finished download of it); else None."""
    shot = Shot.objects.select_related("asset", "analysis_job").filter(pk=shot_id).first()
    if shot is None or not Download.objects.filter(
            owner=user, asset_id=shot.asset_id, status=DownloadStatus.SUCCESSFUL).exists():
        return None
    return shot


def job_state(job):
    """A CV job as pages and the API show it; None when there is none."""
    if job is None:
        return None
    error = SHOTS_IN_USE if job.error_code == ShotsInUse.code else job.error
    state = {"status": job.status.lower(), "progress": job.progress, "phase": job.phase or None,
             "message": job.progress_message or None, "error": str(error) if error else None,
             "error_code": job.error_code or None, "queue_position": None, "waiting_reason": None}
    if job.status == JobStatus.READY:
        standing = job_selectors.standing(job)
        state["queue_position"], state["waiting_reason"] = standing.position, standing.message
    if job.status == JobStatus.SUCCESSFUL:
        state["progress"] = 1.0
    return state


def shot_json(shot, download):
    analysis = shot.analysis
    if analysis is not None:
        analysis = {**analysis, "keyframe_strip_url": reverse(
            "downloads:shot_image", args=[download.pk, shot.index, "strip"])}
        analysis.pop("keyframe_strip", None)
    return {
        "id": shot.pk,
        "index": shot.index,
        "start_s": shot.start_s,
        "end_s": shot.end_s,
        "thumbnail_url": reverse("downloads:shot_image", args=[download.pk, shot.index, "thumbnail"])
        if shot.thumbnail else None,
        "analysis": analysis,
        "analysis_job": job_state(shot.analysis_job),
    }


def shots_state(download):
    """The segment job and the shots of a download's asset, for the page and the API."""
    asset = MediaAsset.objects.select_related("segment_job").get(pk=download.asset_id)
    shots = list(asset.shots.select_related("analysis_job"))
    segment = job_state(asset.segment_job)
    live = (segment is not None and segment["status"] in ("ready", "running")) or any(
        shot.analysis_job is not None and shot.analysis_job.status in ("READY", "RUNNING")
        for shot in shots)
    return {"segment": segment, "shots": [shot_json(shot, download) for shot in shots],
            "live": live}


def page_context(download, *, selected_index=None):
    """What the player page adds for a video: its shots, polled while CV jobs run, and the shot
    whose notes are open (`selected_index`, from the page's address)."""
    if download.current_status != DownloadStatus.SUCCESSFUL or not download.asset.is_video:
        return {}
    selected = None
    if selected_index and selected_index.isascii() and selected_index.isdigit() \
            and len(selected_index) < 10:  # an int4 column
        selected = download.asset.shots.filter(index=int(selected_index)).first()
    return {"shots_template": "downloads/_shots.html", "shots": shots_state(download),
            "selected_shot": selected}

