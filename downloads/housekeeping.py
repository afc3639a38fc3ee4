"""Storage housekeeping: the work of a `downloads.housekeep` job.

Two passes over MEDIA_ROOT's assets, each in batches of a bounded query, each
asset decided in its own short transaction (the services hold the asset's
row lock only while they decide and delete):

1. collect: ready assets no download refers to lose their files
   (`services.asset_collect_or_skip`);
2. evict: while MEDIA_MAX_BYTES is set and the ready files add up to more,
   the least recently used ready assets lose theirs, and the downloads that
   held them show "evicted" (`services.asset_evict`).

Neither pass deletes a file a live job needs or a player is streaming; the
report says what was freed and what was skipped and why. One run looks at
no more than DOWNLOADS_HOUSEKEEPING_MAX_ASSETS assets; the next one starts over.
"""

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Q

from downloads import conf, selectors, services

log = logging.getLogger(__name__)

SKIPPED_IDS_KEPT = 50  # per run: enough to look into, bounded so the job's result stays small


@dataclass
class Report:
    cap_bytes: int = 0  # 0: no cap
    collected: int = 0
    collected_bytes: int = 0
    evicted: int = 0
    evicted_bytes: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> assets
    skipped_assets: dict = field(default_factory=dict)  # asset id -> reason (the first few)
    ready_bytes: int = 0  # after the run
    looked_at: int = 0
    finished: bool = True  # False: stopped early (asset limit, or the job was asked to stop)

    def skip(self, asset_id, reason):
        self.skipped[reason] += 1
        if len(self.skipped_assets) < SKIPPED_IDS_KEPT:
            self.skipped_assets[str(asset_id)] = reason

    @property
    def over_cap(self):
        return bool(self.cap_bytes) and self.ready_bytes > self.cap_bytes

    def as_dict(self):
        return {
            "collected": {"assets": self.collected, "bytes": self.collected_bytes},
            "evicted": {"assets": self.evicted, "bytes": self.evicted_bytes},
            "skipped": dict(self.skipped),
            "skipped_assets": self.skipped_assets,
            "cap_bytes": self.cap_bytes or None,
            "ready_bytes": self.ready_bytes,
            "over_cap": self.over_cap,
            "looked_at": self.looked_at,
            "finished": self.finished,
        }

    def summary(self):
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        cap = f"{self.cap_bytes} bytes" if self.cap_bytes else "none"
        return (f"collected {self.collected} assets ({self.collected_bytes} bytes), "
                f"evicted {self.evicted} ({self.evicted_bytes} bytes), "
                f"skipped {sum(self.skipped.values())} ({skipped or 'none'}); "
                f"ready files now {self.ready_bytes} bytes, cap {cap}"
                + ("" if self.finished else "; stopped early, the next run starts over"))


def run(*, should_stop=None, on_phase=None):
    """Collect, then evict down to the cap; returns the Report (also logged).

    should_stop() is asked between assets (a cancelled or timed-out job ends
    promptly); on_phase(name) is told when a pass starts.
    """
    should_stop = should_stop or (lambda: False)
    on_phase = on_phase or (lambda name: None)
    report = Report(cap_bytes=conf.media_max_bytes())
    budget = conf.housekeeping_max_assets()
    batch = conf.housekeeping_batch()

    def out_of_time():
        if report.looked_at >= budget or should_stop():
            report.finished = False
        return not report.finished

    on_phase("collecting")
    _collect(report, batch, out_of_time)
    if report.cap_bytes and report.finished:
        on_phase("evicting")
        _evict(report, batch, out_of_time)
    report.ready_bytes = selectors.ready_bytes()
    log.info("storage housekeeping: %s", report.summary())
    return report


def _collect(report, batch, out_of_time):
    after = 0
    while True:
        rows = list(selectors.unreferenced_assets().filter(pk__gt=after)
                    .values_list("pk", "size_bytes")[:batch])
        for asset_id, size in rows:
            if out_of_time():
                return
            report.looked_at += 1
            outcome = services.asset_collect_or_skip(asset_id)
            if outcome == "collected":
                report.collected += 1
                report.collected_bytes += size or 0
            elif outcome not in ("gone", "referenced"):
                report.skip(asset_id, outcome)  # a download arriving meanwhile is no skip
        if len(rows) < batch:
            return
        after = rows[-1][0]


def _evict(report, batch, out_of_time):
    # Keyset pagination in LRU order: an asset skipped here is not looked at again this run.
    seen = None
    while (total := selectors.ready_bytes()) > report.cap_bytes:
        order = selectors.eviction_order()
        if seen is not None:
            used_at, asset_id = seen
            order = order.filter(Q(used_at__gt=used_at) | Q(used_at=used_at, pk__gt=asset_id))
        rows = list(order.values_list("pk", "size_bytes", "used_at")[:batch])
        for asset_id, size, used_at in rows:
            if total <= report.cap_bytes or out_of_time():
                return
            report.looked_at += 1
            outcome = services.asset_evict(asset_id, used_at=used_at)
            if outcome == "evicted":
                report.evicted += 1
                report.evicted_bytes += size or 0
                total -= size or 0
            elif outcome != "gone":
                report.skip(asset_id, outcome)
        if len(rows) < batch:
            return
        seen = (rows[-1][2], rows[-1][0])
