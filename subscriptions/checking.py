"""One check of a subscription, as its supervised child process runs it.

    list the entries (yt-dlp flat extraction, under the egress guard)
        │ failed ─► record the error on the subscription; Retry (network) or Fail
        ▼
    drop the entries it has an Entry for ─► request a download of each of the rest, in order
        │ the download queue is full ─► stop: the rest stay unseen for the next check
        ▼
    record what it found

Requesting one entry and remembering it is one transaction, so an entry is
never remembered without its download nor requested twice.
"""

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from downloads import services as downloads
from downloads.errors import DownloadFailed, NetworkFailed
from jobs.exceptions import Fail, Retry
from subscriptions import conf, services
from subscriptions.models import Entry, Subscription, digest


def run(ctx, payload):
    sub = Subscription.objects.select_related("owner").filter(pk=payload["subscription"]).first()
    if sub is None:
        return {"skipped": "deleted"}
    if sub.paused:
        return {"skipped": "paused"}
    ctx.progress(None, phase="listing", force=True)
    try:
        entries = list_entries(sub.url)
    except DownloadFailed as exc:
        services.record_failure(sub.pk, code=exc.code, detail=str(exc))
        if isinstance(exc, NetworkFailed):
            raise Retry(str(exc), code=exc.code) from exc  # the kind's attempts and backoff apply
        raise Fail(str(exc), code=exc.code) from exc
    outcome = request_new(ctx, sub, entries)
    services.record_result(sub.pk, listed=len(entries), new=outcome["new"],
                           requested=outcome["requested"], left=outcome["left"])
    return {"listed": len(entries), **outcome}


def list_entries(url):
    from downloads import ytdlp  # only a real check pays for importing yt-dlp

    return ytdlp.list_entries(url, conf.list_limit())


def unseen(sub, entries):
    """The entries `sub` has not dealt with yet, in listing order, each once: (key, entry)."""
    by_key = {}
    for entry in entries:
        by_key.setdefault(digest(entry["url"]), entry)
    seen = set(Entry.objects.filter(subscription=sub, key__in=list(by_key))
               .values_list("key", flat=True))
    return [(key, entry) for key, entry in by_key.items() if key not in seen]


def request_new(ctx, sub, entries):
    """Request a download of every unseen entry until the owner's queue is full."""
    new = unseen(sub, entries)
    requested = refused = left = 0
    for index, (key, entry) in enumerate(new):
        ctx.progress(index / len(new), phase="requesting",
                     message=_("%(done)d of %(total)d requested") % {"done": index,
                                                                     "total": len(new)})
        try:
            if not _request(sub, key, entry):
                break  # paused or removed meanwhile: stop asking on its behalf
            requested += 1
        except downloads.QueueFull:
            left = len(new) - index  # not remembered: the next check asks for them again
            break
        except ValidationError:  # InvalidURL included: downloads will never take it
            _remember_refused(sub, key, entry)
            refused += 1
        except IntegrityError:
            pass  # another check remembered it first (its download is that check's)
    return {"new": len(new), "requested": requested, "refused": refused, "left": left}


def _request(sub, key, entry):
    with transaction.atomic():
        # The row lock orders this request after a pause or removal that came
        # first, and keeps a removal from deleting the subscription under it.
        if not Subscription.objects.select_for_update().filter(pk=sub.pk, paused=False).exists():
            return False
        download = downloads.download_submit(owner=sub.owner, url=entry["url"], fmt=sub.format,
                                             name=(entry.get("title") or "")[:200])
        Entry.objects.create(subscription=sub, key=key, url=entry["url"],
                             title=(entry.get("title") or "")[:500], download=download)
    return True


def _remember_refused(sub, key, entry):
    with transaction.atomic():
        if Subscription.objects.select_for_update().filter(pk=sub.pk).exists():
            Entry.objects.get_or_create(subscription=sub, key=key, defaults={
                "url": entry["url"], "title": (entry.get("title") or "")[:500]})
