"""One attempt of a download, as its supervised child process runs it.

    cache hit?  ── yes ──► check the owner's quota, done ("cached")
        │ no
    claim the asset (compare-and-set pending → downloading, holder = this lease)
        │
    yt-dlp into staging/<asset id>/ (resuming a paused partial), progress about once a second
        │
    rename into assets/<asset id>/ ─► quota check and asset READY in one transaction ─► done

Stops are the supervisor's business: a cancel, pause, stall or shutdown ends
this process from outside, and the kind's cleanup (`cleanup()`, in the
worker) releases the asset afterwards. Failures end here: the asset is
released and the error becomes Retry (network, disk full) or Fail.
"""

import threading

from django.db import transaction
from django.utils.translation import gettext as _

from downloads import conf, progress, selectors, services, shots, storage
from downloads.errors import DownloadFailed, QuotaExceeded, TooLarge
from downloads.models import Download, MediaAsset
from jobs.exceptions import Retry
from jobs.models import Outcome

ASSET_BUSY_RETRY_S = 10.0


def run(ctx, payload):
    download = Download.objects.select_related("asset", "owner").filter(
        pk=payload["download"]).first()
    if download is None:
        return {"skipped": "deleted"}  # deleted while queued: nothing to do
    asset = download.asset
    if asset.state == MediaAsset.State.READY and not storage.exists(asset.file):
        services.asset_forget(asset.pk)
        asset.refresh_from_db()
    if asset.state == MediaAsset.State.READY:
        return from_cache(ctx, download, asset)
    token = ctx.job.lease_token
    if not services.asset_claim(asset.pk, token):
        asset.refresh_from_db()
        if asset.state == MediaAsset.State.READY:
            return from_cache(ctx, download, asset)
        raise Retry(_("Another worker is fetching the same file."), delay_s=ASSET_BUSY_RETRY_S,
                    code="asset_busy")
    try:
        return transfer(ctx, download, asset, token)
    except DownloadFailed as exc:
        services.asset_release(asset.pk, token, failure=exc)
        raise services.job_error_for(exc) from exc
    except BaseException:
        services.asset_release(asset.pk, token)
        raise


def from_cache(ctx, download, asset):
    size = asset.size_bytes or 0
    ctx.progress(1.0, phase="cached", message=progress.encode(bytes_done=size, bytes_total=size),
                 force=True)
    try:
        with transaction.atomic():
            services.lock_owner(download.owner)
            services.quota_check(download.owner, asset.pk, size)
            services.download_succeeded(download.pk)
            services.asset_touch(asset.pk)
    except QuotaExceeded as exc:
        raise services.job_error_for(exc) from exc
    return {"asset": asset.pk, "size_bytes": size, "from_cache": True}


def byte_limit(owner, asset_id):
    """(max bytes, which limit binds: "quota" or "too_large"), or (None, None) for no limit."""
    left = selectors.storage_left_bytes(owner, excluding=asset_id)
    cap = conf.max_file_bytes() or None
    if left is None and cap is None:
        return None, None
    if cap is None or (left is not None and left <= cap):
        return left, "quota"
    return cap, "too_large"


def transfer(ctx, download, asset, token):
    # Only a real fetch pays for importing yt-dlp, which takes seconds on a busy
    # machine: that is no stall, so the watchdog hears from us meanwhile.
    with ctx.keepalive():
        from downloads import ytdlp

    owner = download.owner
    limit, binding = byte_limit(owner, asset.pk)
    ctx.progress(None, phase="starting",
                 message=progress.encode(bytes_done=storage.partial_bytes(asset.pk)), force=True)

    phases = ["starting"]
    transferring = threading.Event()

    def report(figures):
        transferring.set()
        # A new phase is written at once (the first bytes show without waiting
        # out the throttle); within a phase, at most one write a second.
        changed = figures["phase"] != phases[-1]
        phases[-1] = figures["phase"]
        ctx.progress(figures["fraction"], phase=figures["phase"], force=changed,
                     message=progress.encode(
                         bytes_done=figures["downloaded_bytes"], bytes_total=figures["total_bytes"],
                         speed_bytes_s=figures["speed_bytes_s"], eta_s=figures["eta_s"]))

    def alive():
        # Asked for every chunk yt-dlp receives: each one is a sign of life
        # for the stall watchdog, so only a transfer that moves no bytes stalls.
        ctx.alive()
        return False

    try:
        # Until the first bytes, yt-dlp sets itself up (its extractors, the
        # first request): healthy work that outlasts a short stall timeout on
        # a busy machine. The stall watchdog is for a transfer that stops.
        with ctx.keepalive(0.5, until=transferring):
            result = ytdlp.run_download(asset.url, fmt=asset.format,
                                        staging_dir=storage.staging_dir(asset.pk),
                                        on_progress=report, should_stop=alive, max_bytes=limit)
    except TooLarge as exc:
        # The quota's limit, not a page's (DOWNLOADS_MAX_PAGE_BYTES): the owner's storage is full.
        if binding == "quota" and exc.limit_bytes == limit and not isinstance(exc, QuotaExceeded):
            raise QuotaExceeded(str(exc), size_bytes=exc.size_bytes,
                                limit_bytes=exc.limit_bytes) from exc
        raise
    size = result.size_bytes
    ctx.progress(1.0, phase="finishing",
                 message=progress.encode(bytes_done=size, bytes_total=size), force=True)
    relative = storage.place(asset.pk, result.path)
    try:
        with transaction.atomic():
            services.lock_owner(owner)
            services.quota_check(owner, asset.pk, size)
            if not services.asset_ready(asset.pk, token, file=relative, size_bytes=size,
                                        title=result.title, duration_s=result.duration_s,
                                        metadata=result.info):
                raise Retry(_("This attempt lost the file to another one."), code="asset_busy")
            services.download_succeeded(download.pk)
            shots.asset_segment_if_wanted(asset.pk, owner=owner, after=ctx.job)
    except QuotaExceeded:
        storage.discard_files(asset.pk)  # still ours: the asset is held until released
        raise
    storage.discard_partial(asset.pk)
    return {"asset": asset.pk, "size_bytes": size, "from_cache": False}


def cleanup(job, *, outcome, final):
    """Once the attempt has ended (the engine calls this): let go of the asset if it still held it.

    A pause or a hand-back keeps the partial for whichever attempt comes next,
    and so does a worker that died mid-transfer while the download goes on; a
    cancel keeps it only for other users' downloads of the same asset; any
    other end (a failure, stall, crash, time limit) discards it, so a retry
    starts clean.
    """
    asset_id = (job.payload or {}).get("asset")
    if asset_id is None:
        return
    if outcome in (Outcome.PAUSED, Outcome.REQUEUED) or (outcome == Outcome.EXPIRED and not final):
        partial = "keep"
    elif outcome == Outcome.CANCELLED:
        partial = "if_unneeded"
    else:
        partial = "discard"
    services.asset_release(asset_id, job.lease_token, partial=partial)
    services.asset_collect(asset_id)  # its download may have been deleted meanwhile
