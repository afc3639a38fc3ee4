"""Every change to downloads, assets and quotas: one function each, named <entity>_<verb>.

Views, the API, the admin and the handlers call these; none of them writes a
download, an asset or a quota row itself. Job state changes go through
`jobs.services`, which raises `IllegalTransition` when an action does not fit
the job's state (the API answers 409).
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

import jobs
from downloads import conf, selectors, serving, storage
from downloads.addresses import validate_url
from downloads.errors import (
    DownloadFailed,
    NetworkFailed,
    QuotaExceeded,
    StorageFull,
    TooLarge,
    retry_helps,
)
from downloads.models import (
    UNLIMITED,
    Download,
    DownloadQuota,
    DownloadStatus,
    Format,
    MediaAsset,
    url_digest,
)
from downloads.sites import site_of
from jobs.bounds import parse_rate
from jobs.exceptions import IllegalTransition
from jobs.models import Job, JobStatus

FETCH_KIND = "downloads.fetch"
EDIT_KIND = "downloads.edit"
KINDS = (FETCH_KIND, EDIT_KIND)
S = DownloadStatus
A = MediaAsset.State


class QueueFull(Exception):
    """The user already has as many queued, running or paused downloads as their quota allows."""

    def __init__(self, limit, message=None):
        self.limit = limit
        super().__init__(message or (
            _("You already have %(n)d downloads queued, running or paused; wait for some to "
              "finish or cancel them.") % {"n": limit}))


class TooFast(QueueFull):
    """The user asked for more downloads in the period than the rate allows, cache hits included."""

    def __init__(self, rate):
        super().__init__(rate, _("You are asking for downloads faster than this site allows "
                                 "(%(rate)s); wait a little and ask again.") % {"rate": rate})


def lock_owner(user):
    """Serialise one user's submissions and quota checks until the transaction ends.

    Two tabs submitting at once must not both pass the queued cap, and two
    downloads finishing at once must not both fit in the last free bytes. On
    SQLite the IMMEDIATE transaction already serialises every writer.
    """
    get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk").first()


# --- Submitting ------------------------------------------------------------------

def download_submit(*, owner, url, fmt=Format.BEST, name=""):
    """Check the URL, then create the user's download: finished at once from the cache when the
    asset is ready, else queued as a fetch job. Raises InvalidURL / ValidationError (bad input)
    or QueueFull (over the queued cap); nothing is written then."""
    normalised = validate_url(url)
    if fmt not in Format.values:
        raise ValidationError(gettext_lazy("Choose one of the offered formats."), code="format")
    with transaction.atomic():
        lock_owner(owner)
        _check_queue(owner)
        asset = _source_asset(normalised, fmt)
        download = Download.objects.create(owner=owner, asset=asset, name=(name or "").strip()[:200])
        _start(download)
    return download


def _check_queue(owner):
    """The queued cap and the rate: a download served at once from the cache counts like any
    other, so a burst of them is refused as a burst of fetches would be."""
    quota = selectors.quota_for(owner)
    if quota.unlimited:
        return
    if selectors.live_count(owner) >= quota.max_queued:
        raise QueueFull(quota.max_queued)
    rate = conf.default_rate()
    limit, period_s = parse_rate(rate)
    if selectors.asked_since(owner, timezone.now() - timedelta(seconds=period_s)) >= limit:
        raise TooFast(rate)


def _source_asset(url, fmt):
    asset, _created = MediaAsset.objects.get_or_create(
        url_digest=url_digest(url), format=fmt, parent=None, defaults={"url": url})
    # Locked until commit so a concurrent collection cannot empty it under this download.
    return MediaAsset.objects.select_for_update().get(pk=asset.pk)


def _start(download):
    """Finish from the cache or queue a job; the caller holds the owner's lock."""
    asset = download.asset
    if asset.state == A.READY and not storage.exists(asset.file):
        asset_forget(asset.pk)  # the file went missing: fetch it again
        asset.refresh_from_db()
    if asset.state == A.READY:
        _finish_from_cache(download)
    elif asset.parent_id:
        _enqueue(download, EDIT_KIND)
    else:
        _enqueue(download, FETCH_KIND)


def _finish_from_cache(download):
    asset = download.asset
    left = selectors.storage_left_bytes(download.owner, excluding=asset.pk)
    if left is not None and (asset.size_bytes or 0) > left:
        error = QuotaExceeded(f"The file is {asset.size_bytes} bytes; {left} bytes are left.")
        Download.objects.filter(pk=download.pk).update(
            job=None, status=S.FAILED, error_code=error.code, error=str(error), finished_at=Now())
    else:
        Download.objects.filter(pk=download.pk).update(
            job=None, status=S.SUCCESSFUL, error_code="", error="", finished_at=Now())
        MediaAsset.objects.filter(pk=asset.pk).update(last_accessed_at=Now())
    download.refresh_from_db()


def _enqueue(download, kind):
    quota = selectors.quota_for(download.owner)
    payload = {"download": str(download.pk), "asset": download.asset_id}
    if kind == FETCH_KIND:
        payload["site"] = site_of(download.asset.url)
    job = jobs.enqueue(
        kind, payload,
        owner=download.owner,
        # Only for a key without a limit row yet; staff's quota edits call set_limit.
        limits={quota.concurrency_key: quota.concurrency_limit},
    )
    Download.objects.filter(pk=download.pk).update(
        job=job, status=S.READY, error_code="", error="", finished_at=None)
    download.refresh_from_db()


def edit_submit(*, owner, source, edit, name=""):
    """Queue an edit (downloads.edits.Edit) of one of the owner's finished downloads; the result
    is a download of a derived asset that everyone asking for the same cut shares. Raises
    ValidationError for a cut outside the file, IllegalTransition when `source` is not finished."""
    if source.owner_id != owner.pk or source.current_status != S.SUCCESSFUL:
        raise IllegalTransition(_("Only a finished download can be edited."))
    parent = source.asset
    if edit.op == "trim":
        duration_s = parent.duration_s
        if not (0 <= edit.start_s < edit.end_s) or (duration_s and edit.start_s >= duration_s):
            raise ValidationError(
                gettext_lazy("Choose a start before the end, within the video."), code="range")
    elif not parent.is_video:
        raise ValidationError(gettext_lazy("This file is already audio only."), code="audio")
    with transaction.atomic():
        lock_owner(owner)
        _check_queue(owner)
        # Locked until the edit's job commits: housekeeping then either sees
        # that job and keeps the file, or evicted it first and we refuse here.
        if not MediaAsset.objects.select_for_update().filter(pk=parent.pk, state=A.READY).exists():
            raise IllegalTransition(_("The file to edit is no longer available."))
        asset, _created = MediaAsset.objects.get_or_create(
            parent=parent, edit=edit.spec,
            defaults={"url": parent.url, "url_digest": parent.url_digest,
                      "format": Format.AUDIO if edit.op == "audio" else parent.format,
                      "title": parent.title})
        asset = MediaAsset.objects.select_for_update().get(pk=asset.pk)
        download = Download.objects.create(
            owner=owner, asset=asset, name=(name or "").strip()[:200] or _edit_name(source, edit))
        _start(download)
    return download


def _edit_name(source, edit):
    base = source.name or source.asset.title or _("Download")
    if edit.op == "audio":
        return _("%(name)s (audio)") % {"name": base}
    return _("%(name)s (%(start)s–%(end)s s)") % {
        "name": base, "start": f"{edit.start_s:g}", "end": f"{edit.end_s:g}"}


# --- A user's actions ----------------------------------------------------------

def _job(download, message):
    if download.job_id is None:
        raise IllegalTransition(message)
    return download.job


def download_pause(download, *, actor=None):
    jobs.pause(_job(download, _("Only a queued or running download can be paused.")), actor=actor)


def download_resume(download, *, actor=None):
    jobs.resume(_job(download, _("Only a paused download can be resumed.")), actor=actor)


def download_cancel(download, *, actor=None, reason=""):
    """Cancel it; a download that was not running loses its partial file here (a running one
    loses it when its worker has stopped it). Staff's `reason` is what its owner reads."""
    job = _job(download, _("Only a queued, running or paused download can be cancelled."))
    jobs.cancel(job, actor=actor, reason=reason)
    job = Job.objects.get(pk=job.pk)
    if job.status == JobStatus.CANCELLED:
        download_record_outcome(job)  # now, not only when the engine's signal arrives
        asset_drop_partial(download.asset_id)


def download_retry(download, *, actor=None):
    """Another go for a failed or cancelled download, from a clean start; for an evicted one,
    "download again": served from the cache if someone fetched the file meanwhile, else
    fetched (or the edit made) again, under the same quota rules as a new download."""
    status = download.current_status
    if status not in (S.FAILED, S.CANCELLED, S.EVICTED):
        raise IllegalTransition(
            _("Only a failed, cancelled or evicted download can be tried again."))
    code = (download.job.error_code if download.job_id else download.error_code) or ""
    if status == S.FAILED and not retry_helps(code):
        raise IllegalTransition(_("Trying again would fail the same way: this address cannot "
                                  "be downloaded."))
    with transaction.atomic():
        lock_owner(download.owner)
        _check_queue(download.owner)
        if download.job_id is not None:
            jobs.retry(download.job, actor=actor)
            Download.objects.filter(pk=download.pk).update(
                status=S.READY, error_code="", error="", finished_at=None)
        else:
            # Served from the cache without a job (e.g. refused over quota), or
            # evicted (its job detached): decide again.
            download.asset = MediaAsset.objects.select_for_update().get(pk=download.asset_id)
            _start(download)
    download.refresh_from_db()


def download_delete(download, *, actor=None):
    """Remove the download; a live one is cancelled first, and an asset nobody holds any more
    is deleted from disk."""
    if download.is_live:
        try:
            download_cancel(download, actor=actor)
        except IllegalTransition:
            pass  # it finished meanwhile
    asset_id = download.asset_id
    download.delete()
    asset_collect(asset_id)


def download_record_outcome(job):
    """Copy a finished job's final state onto its download (pruning the job later loses nothing)."""
    code, detail = selectors.job_outcome(job)
    Download.objects.filter(job_id=job.pk).update(
        status=job.status.lower(), error_code=code, error=detail,
        finished_at=job.finished_at or timezone.now())


def download_succeeded(download_id):
    """Record, inside the transaction that checked the quota, that the user now holds the asset."""
    Download.objects.filter(pk=download_id).update(
        status=S.SUCCESSFUL, error_code="", error="", finished_at=Now())


# --- Quotas ----------------------------------------------------------------------

def quota_save(quota):
    """Save a quota and give its user's concurrency keys the new limits (waiting jobs may start)."""
    with transaction.atomic():
        quota.save()
        jobs.set_limit(quota.concurrency_key, quota.concurrency_limit)
        jobs.set_limit(quota.cv_key, quota.cv_limit)


def quota_check(owner, asset_id, size_bytes):
    """Raise QuotaExceeded unless `size_bytes` more fit in the owner's storage; the caller holds
    `lock_owner`. An asset the owner already holds costs nothing more."""
    left = selectors.storage_left_bytes(owner, excluding=asset_id)
    if left is not None and size_bytes > left:
        raise QuotaExceeded(f"The file is {size_bytes} bytes; {left} bytes are left in the quota.",
                            size_bytes=size_bytes, limit_bytes=left)


# --- Assets (one fetch at a time) --------------------------------------------

def _holder_is_gone():
    # The holding attempt no longer runs: its worker died, or it ended without
    # its cleanup (the process was killed before it could release the asset).
    return ~Exists(Job.objects.filter(status=JobStatus.RUNNING, lease_token=OuterRef("holder")))


def asset_claim(asset_id, token):
    """Compare-and-set: make the attempt holding lease `token` the one that fetches the asset.

    True for exactly one caller. The asset's concurrency key (limit 1) already
    keeps a second attempt from running; this also covers an attempt whose
    lease moved on while its process lived.
    """
    claimable = Q(state__in=[A.PENDING, A.ERROR]) | (Q(state=A.DOWNLOADING) & _holder_is_gone())
    return MediaAsset.objects.filter(claimable, pk=asset_id).update(
        state=A.DOWNLOADING, holder=token, error_code="", error="") == 1


def asset_release(asset_id, token, *, failure=None, partial="discard"):
    """The attempt holding `token` stops fetching: the asset goes back to pending (or error).

    partial: "keep" (a pause or shutdown: the next attempt resumes from it),
    "discard" (a failure: a retry starts clean), "if_unneeded" (a cancel: kept
    only for other users' downloads of the same asset). Returns whether this
    attempt still held the asset.
    """
    permanent = failure is not None and not isinstance(failure, (NetworkFailed, StorageFull, TooLarge))
    with transaction.atomic():
        # The row lock keeps the next attempt's claim waiting until the
        # partial is gone, so it never writes into a folder being deleted.
        held = MediaAsset.objects.select_for_update().filter(
            pk=asset_id, state=A.DOWNLOADING, holder=token).first()
        if held is None:
            return False
        MediaAsset.objects.filter(pk=asset_id).update(
            state=A.ERROR if permanent else A.PENDING, holder=None,
            error_code=failure.code if permanent else "",
            error=str(failure) if permanent else "")
        if partial == "discard" or (partial == "if_unneeded" and not _others_need(asset_id)):
            storage.discard_partial(asset_id)
    return True


def asset_ready(asset_id, token, *, file, size_bytes, title="", duration_s=None, metadata=None):
    """The attempt holding `token` finished: the file is in place. False if it no longer held it."""
    with transaction.atomic():
        done = MediaAsset.objects.filter(pk=asset_id, state=A.DOWNLOADING, holder=token).update(
            state=A.READY, holder=None, file=file, size_bytes=size_bytes, title=title[:500],
            duration_s=duration_s, metadata=metadata or {}, ready_at=Now(),
            last_accessed_at=Now(), error_code="", error="")
        if done:
            # A ready asset needs no fetch: every download waiting for it may run now.
            jobs.set_limit(f"asset:{asset_id}", UNLIMITED)
    return bool(done)


def asset_touch(asset_id):
    MediaAsset.objects.filter(pk=asset_id).update(last_accessed_at=Now())


def asset_forget(asset_id):
    """A ready asset whose file is gone is pending again, and fetched one at a time again."""
    with transaction.atomic():
        if MediaAsset.objects.filter(pk=asset_id, state=A.READY).update(
                state=A.PENDING, file="", ready_at=None):
            jobs.set_limit(f"asset:{asset_id}", 1)


def asset_drop_partial(asset_id):
    """Delete a stopped fetch's partial file unless another live download still wants it."""
    with transaction.atomic():
        asset = MediaAsset.objects.select_for_update().filter(pk=asset_id).first()
        if asset is not None and asset.state != A.DOWNLOADING and not _others_need(asset_id):
            storage.discard_partial(asset_id)


def asset_collect(asset_id):
    """Delete the files of an asset no download refers to any more (its row stays, pending).

    False when something still needs them: a download, a fetch holding the
    asset, an edit of it being made or waiting to be asked for again, a live
    job reading it, or a player streaming it (housekeeping comes back later).
    """
    return asset_collect_or_skip(asset_id) == "collected"


def asset_collect_or_skip(asset_id):
    """asset_collect, returning "collected" or why not: "gone", "referenced", "edit_waiting",
    "live_job" / "live_cv_job" or "streaming" (the words of housekeeping's report)."""
    with transaction.atomic():
        asset = MediaAsset.objects.select_for_update().filter(pk=asset_id).first()
        if asset is None:
            return "gone"
        if asset.state == A.DOWNLOADING or asset.downloads.exists():
            return "referenced"
        if selectors.edit_waits_for(asset_id):
            return "edit_waiting"
        kept = _drop_file_unless_used(asset, size_bytes=None)
        if kept:
            return kept
    return "collected"


def _drop_file_unless_used(asset, **also):
    """Delete a row-locked asset's file and make it pending, unless a live job or a player uses
    it; returns why it was kept ("live_job", "live_cv_job", "streaming"), or None."""
    busy = selectors.asset_busy(asset.pk)
    if busy:
        return busy
    if not _discard_unless_read(asset):
        return "streaming"
    was_ready = asset.state == A.READY
    MediaAsset.objects.filter(pk=asset.pk).update(
        state=A.PENDING, file="", ready_at=None, segment_job=None, **also)
    _forget_file_data(asset.pk, was_ready=was_ready)
    return None


def asset_evict(asset_id, *, used_at=None):
    """Delete a ready asset's file to make room; its finished downloads become EVICTED.

    The asset goes back to pending (fetched again, one attempt at a time, when
    someone asks); its row, title and size stay. `used_at` is when the caller
    saw it last used: an asset used since then is no longer the least
    recently used one and is kept. Returns "evicted" or why not: "gone" (not
    ready any more), "used", "live_job" / "live_cv_job", "streaming".
    """
    with transaction.atomic():
        # The row lock holds off every path that would start using the file
        # (a new download served from the cache, an edit's submission) until
        # this commits; they then see a pending asset and fetch it again.
        asset = MediaAsset.objects.select_for_update().filter(pk=asset_id).first()
        if asset is None or asset.state != A.READY:
            return "gone"
        if used_at is not None and _used_since(asset, used_at):
            return "used"
        kept = _drop_file_unless_used(asset)
        if kept:
            return kept
        finished = Q(job__isnull=True, status=S.SUCCESSFUL) | Q(job__status=JobStatus.SUCCESSFUL)
        Download.objects.filter(finished, asset_id=asset_id).update(
            job=None, status=S.EVICTED, error_code="", error="")
    return "evicted"


def _used_since(asset, used_at):
    latest = asset.last_accessed_at or asset.ready_at or asset.created_at
    return latest > used_at


def _discard_unless_read(asset):
    """Delete the asset's files unless a player is streaming the finished one (False then)."""
    try:
        path = storage.absolute(asset.file) if asset.file else None
    except ValueError:
        path = None
    if path is None:
        storage.discard_files(asset.pk)
        return True
    # The exclusive lock is taken without waiting, under the asset's row lock:
    # a stream that holds the file makes us skip it, and one that starts
    # between this check and the unlink cannot, since the lock spans both.
    with serving.unless_read(path) as free:
        if free:
            storage.discard_files(asset.pk)
    return free


def _forget_file_data(asset_id, *, was_ready):
    from downloads import shots

    shots.asset_forget_shots(asset_id)  # they describe a file that is gone
    if was_ready:
        jobs.set_limit(f"asset:{asset_id}", 1)


def asset_touch_if_stale(asset_id, *, every_s=3600):
    """Note that the file was used, at most once per `every_s` (a player sends many requests)."""
    stale = Q(last_accessed_at__isnull=True) | Q(
        last_accessed_at__lt=timezone.now() - timedelta(seconds=every_s))
    MediaAsset.objects.filter(stale, pk=asset_id).update(last_accessed_at=Now())


def _others_need(asset_id):
    """Whether a live download still wants this asset (and so its partial file)."""
    return Download.objects.filter(asset_id=asset_id).live().exists()


def job_error_for(exc):
    """The engine's exception for a download failure: transient causes retry, the rest fail now."""
    from jobs.exceptions import Fail, Retry

    if isinstance(exc, (NetworkFailed, StorageFull)):
        return Retry(str(exc), code=exc.code)
    return Fail(str(exc), code=exc.code)


__all__ = [
    "DownloadFailed", "QueueFull", "download_submit", "download_pause", "download_resume",
    "download_cancel", "download_retry", "download_delete", "download_record_outcome",
    "download_succeeded", "quota_save", "quota_check", "asset_claim", "asset_release",
    "asset_ready", "asset_touch", "asset_forget", "asset_drop_partial", "asset_collect",
    "asset_collect_or_skip", "asset_evict",
    "job_error_for", "DownloadQuota",
]
