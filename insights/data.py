"""What each kind of insight is made from: one data provider per kind, and the fingerprint.

A provider answers, for a user and a subject:

    parse(subject)           the subject in its one canonical spelling (SubjectInvalid otherwise)
    exists(owner, subject)   whether the user may see it and it is still there
    collect(owner, subject)  the facts, as a JSON-able dict; the same data gives the same dict
    prepare(owner, subject, priority)
                             the jobs whose data the insight should wait for, queued now
                             (shot notes: the shot's analysis); most kinds need none

The fingerprint is a digest of those facts and the language asked for, so a
finished insight is regenerated only when one of them changed. Facts must
therefore never depend on the clock ("3 days ago"), only on stored data.
"""

import hashlib
import json

from django.apps import apps
from django.db.models import Q
from django.utils.translation import gettext as _

from core.jsonapi import number_id
from downloads import shots
from downloads.models import Download, DownloadStatus, MediaAsset
from insights.models import InsightKind
from jobs.exceptions import IllegalTransition

# Bump when the facts or the prompts change shape: every insight then counts as stale.
DATA_VERSION = 1
LIBRARY = "library"  # the one subject of a library overview
RECENT_COUNT = 5
DESCRIPTION_CHARS = 2000
SHOTS_MAX = 200  # a video summary reads at most this many shots


class SubjectInvalid(ValueError):
    """The subject is not spelled the way its kind expects (an asset or shot number, or "library")."""


class Unavailable(Exception):
    """This kind of insight cannot be made on this site yet (its data does not exist here)."""


def fingerprint(facts, language):
    """A digest of the facts and the language: equal exactly when a regeneration would be pointless."""
    canonical = json.dumps({"v": DATA_VERSION, "language": language, "facts": facts},
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _seconds(value):
    return None if value is None else round(float(value), 1)


def _number_subject(subject):
    number = number_id(subject.strip() if isinstance(subject, str) else subject)
    if number is None:
        raise SubjectInvalid(_("The subject must be a number."))
    return str(number)


def _shot_model():
    """The Shot model, once the CV app provides it (None before)."""
    try:
        return apps.get_model("downloads", "Shot")
    except LookupError:
        return None


def _analysis_facts(analysis):
    """The parts of a clip analysis (downloads.cv.analyze) worth writing about."""
    if not isinstance(analysis, dict):
        return None
    motion = [p for p in analysis.get("motion") or [] if isinstance(p, list | tuple) and len(p) == 2]
    peak = max(motion, key=lambda p: p[1]) if motion else None
    return {
        "brightness": _round(analysis.get("brightness"), 3),
        "motion_mean": _round(analysis.get("motion_mean"), 4),
        "motion_peak_at_s": _seconds(peak[0]) if peak else None,
        "motion_peak": _round(peak[1], 4) if peak else None,
        "colors": [{"hex": str(c.get("hex", "")), "share": _round(c.get("share"), 2)}
                   for c in (analysis.get("colors") or [])[:3] if isinstance(c, dict)],
    }


def _round(value, digits):
    return round(float(value), digits) if isinstance(value, int | float) else None


def _shot_facts(shot):
    # The fields the CV app's Shot rows carry (see downloads.cv.segment/analyze).
    return {
        "index": shot.index,
        "start_s": _seconds(shot.start_s),
        "end_s": _seconds(shot.end_s),
        "analysis": _analysis_facts(getattr(shot, "analysis", None)),
    }


class NeedsNothing:
    def prepare(self, owner, subject, priority):
        return []


class VideoSummary(NeedsNothing):
    """Subject: a media asset the user has a download of."""

    def parse(self, subject):
        return _number_subject(subject)

    def exists(self, owner, subject):
        return Download.objects.filter(owner=owner, asset_id=int(subject)).exists()

    def collect(self, owner, subject):
        asset = MediaAsset.objects.get(pk=int(subject))
        info = asset.metadata or {}
        facts = {
            "title": asset.title or str(info.get("title") or ""),
            "duration_s": _seconds(asset.duration_s),
            "audio_only": not asset.is_video,
            "uploader": str(info.get("uploader") or info.get("channel") or ""),
            "upload_date": str(info.get("upload_date") or ""),
            "width": info.get("width") if isinstance(info.get("width"), int) else None,
            "height": info.get("height") if isinstance(info.get("height"), int) else None,
            "description": str(info.get("description") or "")[:DESCRIPTION_CHARS],
            "edit": asset.edit,
            "shots": [],
        }
        shot_model = _shot_model()
        if shot_model is not None:
            shots = shot_model.objects.filter(asset=asset).order_by("index")[:SHOTS_MAX]
            facts["shots"] = [_shot_facts(shot) for shot in shots]
        return facts


class ShotNotes:
    """Subject: one shot of an asset the user has a download of."""

    def parse(self, subject):
        return _number_subject(subject)

    def _shot(self, subject):
        shot_model = _shot_model()
        if shot_model is None:
            raise Unavailable(_("Shot notes are not available: this site has no shot analysis yet."))
        return shot_model.objects.select_related("asset").filter(pk=int(subject)).first()

    def exists(self, owner, subject):
        try:
            shot = self._shot(subject)
        except Unavailable:
            return False
        return shot is not None and Download.objects.filter(owner=owner,
                                                            asset_id=shot.asset_id).exists()

    def prepare(self, owner, subject, priority):
        """The shot's analysis, asked for at `priority` when it has none: notes written
        before it would only say the shot has not been analysed."""
        shot = self._shot(subject)
        if shot is None or getattr(shot, "analysis", None) is not None:
            return []
        try:
            # No transport check: the notes wait for the analysis, which waits for Redis.
            return [shots.shot_analyze(shot, owner=owner, priority=priority,
                                       check_transport=False)]
        except (IllegalTransition, shots.CVQueueFull):
            # The file is gone, or the user's CV work is at its cap: the notes say what is
            # known without the analysis.
            return []

    def collect(self, owner, subject):
        shot = self._shot(subject)
        if shot is None:
            raise Unavailable(_("This shot no longer exists."))
        return {
            "video_title": shot.asset.title,
            "video_duration_s": _seconds(shot.asset.duration_s),
            **_shot_facts(shot),
        }


class LibraryOverview(NeedsNothing):
    """Subject: the user's library, always "library"."""

    def parse(self, subject):
        if str(subject).strip() != LIBRARY:
            raise SubjectInvalid(_('The subject of a library overview is "library".'))
        return LIBRARY

    def exists(self, owner, subject):
        return True

    def collect(self, owner, subject):
        mine = Download.objects.filter(owner=owner)
        finished = list(mine.successful().select_related("asset").order_by("created_at", "pk"))
        assets = {d.asset_id: d.asset for d in finished}.values()
        failed = mine.filter(Q(job__status="FAILED") | Q(job__isnull=True,
                                                         status=DownloadStatus.FAILED)).count()
        durations = [a.duration_s for a in assets if a.duration_s]
        longest = max(assets, key=lambda a: a.duration_s or 0, default=None)
        recent = sorted(finished, key=lambda d: (d.finished_at or d.created_at, str(d.pk)),
                        reverse=True)[:RECENT_COUNT]
        return {
            "downloads": len(finished),
            "videos": sum(1 for a in assets if a.is_video),
            "audio": sum(1 for a in assets if not a.is_video),
            "failed": failed,
            "total_duration_s": _seconds(sum(durations)) if durations else 0.0,
            "total_bytes": sum(a.size_bytes or 0 for a in assets),
            "first_day": _day(finished[0].created_at) if finished else None,
            "last_day": _day(max(d.finished_at or d.created_at for d in finished)) if finished else None,
            "longest": {"title": longest.title, "duration_s": _seconds(longest.duration_s)}
            if longest is not None and longest.duration_s else None,
            "recent": [{"title": d.name or d.asset.title, "duration_s": _seconds(d.asset.duration_s),
                        "audio_only": not d.asset.is_video, "day": _day(d.finished_at or d.created_at)}
                       for d in recent],
        }


def _day(moment):
    return moment.date().isoformat()


PROVIDERS = {
    InsightKind.VIDEO_SUMMARY: VideoSummary(),
    InsightKind.SHOT_NOTES: ShotNotes(),
    InsightKind.LIBRARY_OVERVIEW: LibraryOverview(),
}


def provider(kind):
    return PROVIDERS[InsightKind(kind)]
