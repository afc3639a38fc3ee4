"""The download app's job kinds and their policies (imported by every process at start-up).

downloads.fetch     fetch a URL with yt-dlp in a supervised child process
downloads.edit      cut or extract audio from a ready asset with ffmpeg, likewise
downloads.segment   split a ready video into shots, on the CV fleet (through Redis)
downloads.analyze   measure one shot, likewise
downloads.housekeep storage housekeeping (downloads/housekeeping.py), inline, one at a time

Both carry the owner's concurrency key (the quota's concurrent downloads)
and the asset's (limit 1 while it is being made, raised once it is ready, so
exactly one attempt fetches a file and everyone else waits for it without
spinning). A fetch also carries its site's (downloads/sites.py): a
concurrency key and a rate key "site:<domain>", so a long playlist starts at
DOWNLOADS_SITE_RATE and runs DOWNLOADS_SITE_CONCURRENCY at a time. Each process
of a fetch or an edit may use at most DOWNLOADS_MEMORY_LIMIT of memory. Stall
timeouts and the rest are read from settings when this module is imported,
i.e. when a worker starts.
"""

from django.utils.translation import gettext_lazy as _

from downloads import conf, edits, fetch, housekeeping, services, shots
from jobs.engine.registry import kind


def _keys(payload, owner):
    site = _site_key(payload, owner)
    return [f"user:{owner.pk}", f"asset:{payload['asset']}", *([site] if site else [])]


def _site_key(payload, owner):
    # Only a fetch reaches the site; an edit works on a file already here.
    return f"site:{payload['site']}" if payload.get("site") else None


def _unique(payload, owner):
    return f"download:{payload['download']}"


def _options():
    return {
        "stall_timeout_s": conf.stall_timeout_s(),
        "kill_grace_s": conf.kill_grace_s(),
        "wall_clock_cap_s": conf.wall_clock_cap_s(),
        # yt-dlp reads what a URL answers into memory, and ffmpeg decodes what it is given:
        # a hostile server or file must not take the machine's memory with it.
        "limits": {"data_bytes": conf.memory_limit_bytes()},  # None: no cap
    }


POLICY = {
    "mode": "process",
    "queue": "downloads",
    "max_attempts": 3,
    "unique_key": _unique,
    "concurrency_keys": _keys,
    "default_limits": {"user": conf.default_concurrent(), "asset": 1,
                       "site": conf.site_concurrency()},
    "rate_limit": conf.site_rate,  # read at each enqueue: a key's row takes it once
    "rate_key": _site_key,
    "options": _options(),
    # The download keeps its job's final state, so pruning the job loses nothing.
    "finished": services.download_record_outcome,
}


@kind("downloads.fetch", label=_("Download"), cleanup=fetch.cleanup, **POLICY)
def fetch_media(ctx, payload):
    return fetch.run(ctx, payload)


@kind("downloads.edit", label=_("Edit"), cleanup=edits.cleanup, **POLICY)
def edit_media(ctx, payload):
    return edits.run(ctx, payload)


def _not_here(ctx, payload):
    raise AssertionError("redis-mode jobs run on CV workers (downloads/cvhandlers.py), not here")


def _cv_user_key(payload, owner):
    # One user's CV work runs a few at a time: a burst of analyses waits behind its own key.
    return [f"cv-user:{owner.pk}"] if owner is not None else []


CV_POLICY = {"mode": "redis", "queue": "cv", "max_attempts": 3, "concurrency_keys": _cv_user_key,
             "default_limits": {"cv-user": conf.cv_concurrent()}}

kind("downloads.segment", label=_("Shot detection"), unique_key=lambda payload, owner: f"segment:{payload['asset']}",
     options={"cv_type": "segment"}, ingest=shots.segment_ingest, **CV_POLICY)(_not_here)
kind("downloads.analyze", label=_("Shot analysis"), unique_key=lambda payload, owner: f"analyze:{payload['shot']}",
     options={"cv_type": "analyze"}, ingest=shots.analyze_ingest, **CV_POLICY)(_not_here)


HOUSEKEEP_KIND = "downloads.housekeep"

# Read here, at start-up, only so that a malformed MEDIA_MAX_BYTES stops the
# process with its sentence instead of failing the first run; each run reads it again.
conf.media_max_bytes()


# Inline: it is database work and unlinks, short per asset. The unique key
# keeps at most one live run, however many machines' schedules fire it.
@kind(HOUSEKEEP_KIND, label=_("Storage housekeeping"), mode="inline", queue="default", max_attempts=2,
      unique_key=lambda payload, owner: HOUSEKEEP_KIND, timeout_s=conf.housekeeping_timeout_s())
def housekeep(ctx, payload):
    def phase(name):
        ctx.progress(None, phase=name, force=True)

    return housekeeping.run(should_stop=ctx.should_stop, on_phase=phase).as_dict()
