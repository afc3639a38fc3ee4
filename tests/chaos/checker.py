"""The checker: what a chaos run's evidence says about the engine's guarantees.

It works on plain data, so it can be tested on evidence written by hand:

- the ledger lines every execution appended (tests/chaos/kinds.py);
- the job rows and their events (JobEvent: expired, retry, requeued, ...) after the drain;
- the faults the harness injected, with the jobs a lost worker held at that moment;
- the sampler's view of RUNNING jobs per concurrency key;
- what the load generator was told (acknowledged ids, refusals);
- for downloads: every asset's state (and whether a ready file is the origin's
  bytes), the staging folders left under MEDIA_ROOT, and the failure codes a
  scenario expects (a full disk fails downloads with `storage_full`).

Words used below: an *execution* is one (job, lease token) pair that wrote a
ledger start line; its *lease end* is when its token stopped being the job's
lease (the time of the rescue, retry, failure or requeue event that took it);
the execution that committed the job's result has none.

A CV execution (redis mode) is named `cv<attempt>`: the CV fleet knows the
attempt, not the lease token. Two things follow. An attempt handed back to the
queue (requeued) keeps running on the fleet and is watched again by the next
claim, so a requeue does not end its lease. And the same attempt may run again
after its first run ended (Redis lost its record), but never twice at once.
"""

import dataclasses
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# Events that end the lease of the attempt they name, besides completion (which the
# ledger's own lines time). Every word of jobs.models.Outcome that moves a RUNNING job.
LEASE_ENDING = {"expired", "requeued", "retry", "failed", "cancelled", "paused", "snoozed",
                "timeout", "stalled", "crashed"}
# ... except for a CV execution: a requeue gives the attempt back, and the fleet runs on.
CV_LEASE_ENDING = LEASE_ENDING - {"requeued", "paused"}
CV_PREFIX = "cv"  # engine lease tokens are UUIDs: never "cv..."
# An execution's own rescue may be stamped a moment before its start line: a
# child can pass its lease check just before the rescue and write after it.
EVENT_BEFORE_START_S = 0.05
# An enqueue that takes longer than this to answer, either way, counts as a hang.
ENQUEUE_HANG_S = 5.0
INF = float("inf")


class GuaranteeBroken(AssertionError):
    """A chaos run broke one of the engine's guarantees; the message is the checker's report."""


# --- Evidence --------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One ledger line (see tests/chaos/kinds.py for the format)."""

    event: str
    job: int
    attempt: int
    token: str
    pid: int
    worker_pid: int
    mono: float
    wall: float
    extra: str

    @classmethod
    def parse(cls, text):
        parts = text.split()
        if len(parts) != 9:
            return None
        try:
            return cls(parts[0], int(parts[1]), int(parts[2]), parts[3], int(parts[4]),
                       int(parts[5]), float(parts[6]), float(parts[7]), parts[8])
        except ValueError:
            return None


def read_ledger(folder):
    """Every well-formed line of every ledger file in `folder`."""
    lines = []
    for path in sorted(Path(folder).glob("*.ledger")):
        for text in path.read_text().splitlines():
            line = Line.parse(text)
            if line is not None:
                lines.append(line)
    return lines


@dataclass(frozen=True)
class JobRow:
    id: int
    status: str
    result: dict | None
    attempts: int
    keys: tuple = ()
    error_code: str = ""
    n: int | None = None  # the load generator's number for the job (its payload's "n")
    kind: str = ""  # "" or "chaos.*": a ledger kind; others (downloads.fetch) write none
    error_codes: tuple = ()  # the code of every failed attempt (the job's error log)

    @property
    def writes_ledger(self):
        return not self.kind or self.kind.startswith("chaos.")


@dataclass(frozen=True)
class AssetRow:
    """A MediaAsset after the run; `intact` says whether a ready file is the origin's bytes."""

    id: int
    state: str
    holder: str | None = None
    intact: bool | None = None  # None: not ready, so no file to compare


@dataclass(frozen=True)
class Event:
    job: int
    kind: str
    attempt: int
    wall: float


@dataclass
class Fault:
    """One injected fault. `held` lists (job, token) a lost worker held then; None: unknown."""

    kind: str
    target: str
    mono: float
    wall: float
    pid: int | None = None
    loses_worker: bool = False
    held: list | None = None
    detail: dict = field(default_factory=dict)


@dataclass
class Evidence:
    lines: list
    jobs: list
    events: list
    faults: list
    limits: dict  # concurrency key -> limit
    acked: set  # the numbers ("n") of the jobs whose enqueue call answered with success
    enqueue_calls: list = field(default_factory=list)  # (seconds, error or "")
    sampled_violations: list = field(default_factory=list)  # (mono, key, running, limit)
    samples: int = 0
    claims_seen: dict = field(default_factory=dict)  # (job, token) -> monotonic, by the sampler
    survivors: list = field(default_factory=list)  # (pid, marker, why)
    end_wall: float = INF  # when the run stopped looking
    locked_errors_enqueue: int = 0
    locked_errors_workers: int = 0
    integrity: str | None = None  # SQLite: PRAGMA integrity_check; None elsewhere
    exits: list = field(default_factory=list)  # (pid, wall): worker processes found dead
    assets: list = field(default_factory=list)  # AssetRow
    staging: list = field(default_factory=list)  # (folder name, [file names]) under staging/
    paused_assets: set = field(default_factory=set)  # assets a paused download keeps a partial for
    allowed_failures: dict = field(default_factory=dict)  # error code -> why the scenario allows it


def save(evidence, path):
    """Write `evidence` as JSON, so a run can be checked again later (`load`)."""
    data = dataclasses.asdict(evidence)
    data["acked"] = sorted(evidence.acked)
    data["paused_assets"] = sorted(evidence.paused_assets)
    data["claims_seen"] = [[job, token, mono] for (job, token), mono in evidence.claims_seen.items()]
    Path(path).write_text(json.dumps(data))


def load(path):
    data = json.loads(Path(path).read_text())
    data["lines"] = [Line(**x) for x in data["lines"]]
    data["jobs"] = [JobRow(**{**x, "keys": tuple(x["keys"])}) for x in data["jobs"]]
    data["events"] = [Event(**x) for x in data["events"]]
    data["faults"] = [Fault(**x) for x in data["faults"]]
    data["acked"] = set(data["acked"])
    data["assets"] = [AssetRow(**x) for x in data.get("assets", [])]
    data["paused_assets"] = set(data.get("paused_assets", []))
    data["claims_seen"] = {(job, token): mono for job, token, mono in data["claims_seen"]}
    return Evidence(**data)


# --- Executions -------------------------------------------------------------------------


@dataclass
class Execution:
    job: int
    token: str
    attempt: int
    pid: int
    worker_pid: int
    start: Line
    starts: int = 1
    end: Line | None = None
    lease_end_wall: float | None = None  # None: still held, or ended by the completion
    restarts: list = field(default_factory=list)  # start lines seen again before an end

    @property
    def is_cv(self):
        return self.token.startswith(CV_PREFIX)

    @property
    def began_mono(self):
        """When the execution began: its process's spawn for a child, else the start line."""
        return float(self.start.extra) if self.start.extra != "-" else self.start.mono


def executions(lines):
    """{job: [Execution in claim order]} from the ledger."""
    by_key = defaultdict(list)  # (job, token) -> executions, the current one last
    for line in sorted(lines, key=lambda x: x.wall):
        key = (line.job, line.token)
        ex = by_key[key][-1] if by_key[key] else None
        if line.event == "start":
            # A CV attempt may run again once its run ended (Redis forgot it).
            if ex is None or (ex.is_cv and ex.end is not None):
                by_key[key].append(Execution(line.job, line.token, line.attempt, line.pid,
                                             line.worker_pid, line))
            else:
                ex.starts += 1
                ex.restarts.append(line)
        elif ex is not None and ex.end is None:
            ex.end = line
    jobs = defaultdict(list)
    for runs in by_key.values():
        for ex in runs:
            jobs[ex.job].append(ex)
    for runs in jobs.values():
        # Claims number attempts upwards (a requeue gives one back: then by time).
        runs.sort(key=lambda ex: (ex.attempt, ex.start.wall))
    return jobs


def attach_lease_ends(runs, events):
    """Give each execution of one job the time its lease ended, from that job's events.

    Each claim ends with at most one such event, naming its attempt. Attempt
    numbers repeat only after a requeue or pause gave one back; then the
    executions sharing a number take that number's events in time order.
    """
    cv = any(ex.is_cv for ex in runs)
    ending = defaultdict(list)
    for event in sorted(events, key=lambda e: e.wall):
        if event.kind in (CV_LEASE_ENDING if cv else LEASE_ENDING):
            ending[event.attempt].append(event)
    sharing = defaultdict(list)
    for ex in runs:
        sharing[ex.attempt].append(ex)
    for attempt, group in sharing.items():
        free = ending.get(attempt, [])
        if len(group) == 1:
            # The claim's own event, even if stamped before its start line: a
            # worker frozen between claim and start begins after its rescue.
            group[0].lease_end_wall = free[0].wall if free else None
            continue
        for ex in group:
            for event in free:
                if event.wall >= ex.start.wall - EVENT_BEFORE_START_S:
                    ex.lease_end_wall = event.wall
                    free.remove(event)
                    break


# --- The report -------------------------------------------------------------------------


@dataclass
class Report:
    scenario: str
    seed: int
    database: str
    bound_s: float
    slack_s: float
    jobs: int = 0
    faults: Counter = field(default_factory=Counter)
    lost: list = field(default_factory=list)  # (job, status, error code)
    duplicated: list = field(default_factory=list)  # (job, why)
    overlaps: list = field(default_factory=list)  # (job, earlier token, later token, why)
    limit_sampled: list = field(default_factory=list)
    limit_ledger: list = field(default_factory=list)  # (key, limit, running, wall)
    recoveries: list = field(default_factory=list)  # (fault kind, target, seconds, where)
    reclaims: list = field(default_factory=list)  # the same after a child's crash (not bounded)
    unrecovered: list = field(default_factory=list)  # (fault kind, target, job)
    survivors: list = field(default_factory=list)
    missing_acked: list = field(default_factory=list)
    enqueue_hangs: list = field(default_factory=list)
    enqueue_refused: int = 0
    enqueue_slowest_s: float = 0.0
    reruns_after_commit: int = 0  # jobs whose effect was committed by more than one execution
    stale_starts: int = 0  # executions that began after their lease had ended
    rescues: int = 0
    cv_executions: int = 0  # executions on the CV fleet (redis mode)
    samples: int = 0
    locked_errors_enqueue: int = 0
    locked_errors_workers: int = 0
    integrity: str | None = None
    stuck_assets: list = field(default_factory=list)  # (asset, holder)
    leftover_staging: list = field(default_factory=list)  # (folder, [files])
    corrupt_assets: list = field(default_factory=list)  # asset ids whose ready file is wrong
    failed_allowed: Counter = field(default_factory=Counter)  # error code -> jobs
    attempt_errors: Counter = field(default_factory=Counter)  # downloads: code -> failed attempts
    unclear_errors: list = field(default_factory=list)  # (job, code) a fault does not explain
    notes: list = field(default_factory=list)

    @property
    def worst_recovery_s(self):
        return max((r[2] for r in self.recoveries), default=None)

    @property
    def late_recoveries(self):
        return [r for r in self.recoveries if r[2] > self.bound_s + self.slack_s]

    def violations(self):
        """{name: count} of every broken guarantee; empty when the run is clean."""
        found = {
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "overlaps": len(self.overlaps),
            "limit violations (sampled)": len(self.limit_sampled),
            "limit violations (ledger)": len(self.limit_ledger),
            "late recoveries": len(self.late_recoveries),
            "unrecovered": len(self.unrecovered),
            "survivors": len(self.survivors),
            "acknowledged but missing": len(self.missing_acked),
            "enqueue hangs": len(self.enqueue_hangs),
            "'database is locked' at enqueue": self.locked_errors_enqueue,
            "assets stuck in downloading": len(self.stuck_assets),
            "leftover staging": len(self.leftover_staging),
            "corrupt assets": len(self.corrupt_assets),
            "unexplained download errors": len(self.unclear_errors),
        }
        if self.integrity not in (None, "ok"):
            found["integrity_check"] = 1
        return {name: n for name, n in found.items() if n}

    def ok(self):
        return not self.violations()

    def require_ok(self):
        """Raise GuaranteeBroken (with the whole report) unless the run was clean."""
        if not self.ok():
            raise GuaranteeBroken(self.describe())

    def row(self):
        """The figures of this run, as the table in docs/reliability.md shows them."""
        worst = self.worst_recovery_s
        return {
            "scenario": self.scenario,
            "database": self.database,
            "jobs": self.jobs,
            "faults": sum(self.faults.values()),
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "overlaps": len(self.overlaps),
            "limit violations": len(self.limit_sampled) + len(self.limit_ledger),
            "worst recovery": "-" if worst is None else f"{worst:.2f} s",
            "late recoveries": len(self.late_recoveries) + len(self.unrecovered),
            "survivors": len(self.survivors),
            "enqueue hangs": len(self.enqueue_hangs),
            "acknowledged missing": len(self.missing_acked),
            "stuck assets": len(self.stuck_assets),
            "leftover staging": len(self.leftover_staging),
        }

    def describe(self):
        """A human-readable account: the figures, then every violation with its evidence."""
        recoveries = [r[2] for r in self.recoveries]
        median = f"{statistics.median(recoveries):.2f} s" if recoveries else "-"
        worst = self.worst_recovery_s
        lines = [
            f"scenario {self.scenario} on {self.database}, seed {self.seed}",
            f"  jobs {self.jobs}; faults {dict(self.faults) or 0}; rescues {self.rescues}; "
            f"re-runs after commit {self.reruns_after_commit}; stale starts {self.stale_starts}; "
            f"CV executions {self.cv_executions}",
            f"  enqueue: refused {self.enqueue_refused}, slowest answer {self.enqueue_slowest_s:.2f} s",
            f"  recovery: {len(recoveries)} measured, median {median}, worst "
            f"{'-' if worst is None else f'{worst:.2f} s'} (bound {self.bound_s:.1f} s "
            f"+ {self.slack_s:.1f} s slack)",
            f"  sampler: {self.samples} samples",
        ]
        for kind, target, seconds, where in self.recoveries:
            lines.append(f"    recovery after {kind} of {target}: {seconds:.2f} s {where}")
        if self.reclaims:
            times = [r[2] for r in self.reclaims]
            lines.append(f"  claimed again after a child's crash: {len(times)} measured, median "
                         f"{statistics.median(times):.2f} s, worst {max(times):.2f} s "
                         "(a retry after backoff; not bound by the lease)")
        if self.failed_allowed or self.attempt_errors:
            lines.append(f"  downloads: failed attempts by code {dict(self.attempt_errors)}; "
                         f"failed for good, as the scenario allows: {dict(self.failed_allowed)}")
        if self.integrity is not None:
            lines.append(f"  SQLite integrity_check: {self.integrity}; 'database is locked' "
                         f"logged by workers: {self.locked_errors_workers}")
        lines += [f"  note: {note}" for note in self.notes]
        violations = self.violations()
        lines.append("  violations: " + (", ".join(f"{k} {v}" for k, v in violations.items())
                                         if violations else "none"))
        details = [("lost", self.lost), ("duplicated", self.duplicated),
                   ("overlap", self.overlaps), ("limit (sampled)", self.limit_sampled),
                   ("limit (ledger)", self.limit_ledger), ("late recovery", self.late_recoveries),
                   ("unrecovered", self.unrecovered), ("survivor", self.survivors),
                   ("missing", self.missing_acked), ("enqueue hang", self.enqueue_hangs),
                   ("stuck asset", self.stuck_assets), ("leftover staging", self.leftover_staging),
                   ("corrupt asset", self.corrupt_assets), ("unexplained error", self.unclear_errors)]
        for name, items in details:
            for item in items[:10]:
                lines.append(f"    {name}: {item}")
            if len(items) > 10:
                lines.append(f"    {name}: ... {len(items) - 10} more")
        return "\n".join(lines)


def table(reports):
    """A Markdown table of several runs' figures."""
    rows = [r.row() for r in reports]
    if not rows:
        return ""
    heads = list(rows[0])
    out = ["| " + " | ".join(heads) + " |", "|" + "|".join(" --- " for _ in heads) + "|"]
    out += ["| " + " | ".join(str(row[h]) for h in heads) + " |" for row in rows]
    return "\n".join(out)


# --- The checks ----------------------------------------------------------------------------


def check(evidence, *, scenario, seed, database, bound_s, slack_s):
    report = Report(scenario=scenario, seed=seed, database=database, bound_s=bound_s,
                    slack_s=slack_s)
    report.jobs = len(evidence.jobs)
    report.faults = Counter(f.kind for f in evidence.faults)
    report.samples = evidence.samples
    report.survivors = list(evidence.survivors)
    report.locked_errors_enqueue = evidence.locked_errors_enqueue
    report.locked_errors_workers = evidence.locked_errors_workers
    report.integrity = evidence.integrity
    report.rescues = sum(1 for e in evidence.events if e.kind == "expired")

    runs = executions(evidence.lines)
    events_by_job = defaultdict(list)
    for event in evidence.events:
        events_by_job[event.job].append(event)
    for job, job_runs in runs.items():
        attach_lease_ends(job_runs, events_by_job[job])
        report.cv_executions += sum(1 + len(ex.restarts) for ex in job_runs if ex.is_cv)

    _check_lost(report, evidence)
    _check_results(report, evidence, runs)
    _check_overlaps(report, runs, _ends_by_pid(evidence))
    _check_limits(report, evidence, runs)
    _check_recovery(report, evidence, runs)
    _check_enqueue(report, evidence)
    _check_assets(report, evidence)
    _check_staging(report, evidence)
    return report


def _ends_by_pid(evidence):
    """{pid: [wall]} when a process of the run was killed by a fault or found dead."""
    ends = defaultdict(list)
    for fault in evidence.faults:
        if fault.pid is not None and fault.kind.endswith("kill"):
            ends[fault.pid].append(fault.wall)
    for pid, wall in evidence.exits:
        ends[pid].append(wall)
    return ends


def _check_lost(report, evidence):
    """A ledger job must succeed; any other (a download) must at least finish, or fail as allowed.

    Every failed attempt of a download must say why in a way the scenario's
    faults explain (a full disk: `storage_full`), never as a bare error.
    """
    for job in evidence.jobs:
        if not job.writes_ledger:
            for code in job.error_codes:
                report.attempt_errors[code] += 1
                if code not in evidence.allowed_failures:
                    report.unclear_errors.append((job.id, code))
        if job.status == "SUCCESSFUL":
            continue
        if not job.writes_ledger and job.status in ("FAILED", "CANCELLED") \
                and job.error_code in evidence.allowed_failures:
            report.failed_allowed[job.error_code] += 1
            continue
        report.lost.append((job.id, job.status, job.error_code))


def _check_results(report, evidence, runs):
    """The result must name one execution that committed it, and whose lease never ended."""
    for job in evidence.jobs:
        if not job.writes_ledger:
            continue
        job_runs = runs.get(job.id, [])
        commits = {ex.token for ex in job_runs if ex.end is not None and ex.end.event == "commit"}
        if len(commits) > 1:
            report.reruns_after_commit += 1
        if job.status != "SUCCESSFUL":
            continue
        token = (job.result or {}).get("token")
        # A CV attempt run twice in a row has two executions of one name; the last commit counts.
        named = sorted((ex for ex in job_runs if ex.token == token),
                       key=lambda ex: (ex.end is not None and ex.end.event == "commit", ex.start.wall),
                       reverse=True)
        if not named:
            report.duplicated.append((job.id, f"result names no execution in the ledger: {job.result}"))
        elif token not in commits:
            report.duplicated.append((job.id, f"execution {token} wrote no commit line"))
        elif named[0].lease_end_wall is not None:
            report.duplicated.append((job.id, f"result written by {token} after its lease ended"))
        elif (job.result or {}).get("attempt") != named[0].attempt:
            report.duplicated.append((job.id, f"result's attempt {job.result} is not {named[0].attempt}"))


def _check_overlaps(report, runs, ends_by_pid):
    for job, job_runs in runs.items():
        for ex in job_runs:
            if ex.is_cv:
                # The same CV attempt started again: fine once the first run's
                # process was gone (its message went back to the queue), else two at once.
                for again in ex.restarts:
                    if not any(ex.start.wall <= w <= again.wall for w in ends_by_pid.get(ex.pid, [])):
                        report.overlaps.append((job, ex.token, ex.token,
                                                "the same CV attempt ran twice at once"))
            elif ex.starts > 1:
                report.overlaps.append((job, ex.token, ex.token, f"{ex.starts} starts under one lease"))
            if ex.lease_end_wall is not None and ex.start.wall > ex.lease_end_wall:
                report.stale_starts += 1
        for i, earlier in enumerate(job_runs):
            for later in job_runs[i + 1:]:
                held_until = earlier.lease_end_wall
                if earlier.token == later.token:
                    # One CV attempt run again: the first run must have ended by then.
                    held_until = earlier.end.wall if earlier.end is not None else None
                if held_until is None:
                    held_until = INF  # never ended: it holds the lease still, or committed
                if later.start.wall < held_until:
                    why = ("the earlier lease never ended" if held_until == INF
                           else f"started {held_until - later.start.wall:.3f} s before the earlier lease ended")
                    report.overlaps.append((job, earlier.token, later.token, why))


def _end_wall(ex, kills_by_pid, end_wall):
    """When an execution stopped holding its slot: its end line, its process's kill, or its lease end."""
    candidates = []
    if ex.end is not None:
        candidates.append(ex.end.wall)
    for pid in {ex.pid, ex.worker_pid}:
        candidates += [wall for wall in kills_by_pid.get(pid, []) if wall >= ex.start.wall]
    if ex.lease_end_wall is not None:
        candidates.append(ex.lease_end_wall)
    return min(candidates, default=end_wall)


def _check_limits(report, evidence, runs):
    report.limit_sampled = list(evidence.sampled_violations)
    keys_of = {job.id: job.keys for job in evidence.jobs}
    kills_by_pid = _ends_by_pid(evidence)
    moments = defaultdict(list)  # key -> [(wall, +1/-1)]
    for job, job_runs in runs.items():
        for ex in job_runs:
            begin = ex.start.wall
            finish = _end_wall(ex, kills_by_pid, evidence.end_wall)
            if finish <= begin:
                continue  # began after its lease had ended: it held no slot
            for key in keys_of.get(job, ()):
                moments[key] += [(begin, 1), (finish, -1)]
    for key, marks in moments.items():
        limit = evidence.limits.get(key)
        if limit is None:
            continue
        running, over = 0, False
        # At one instant an end comes before a start: a slot handed on is not two.
        for wall, step in sorted(marks, key=lambda m: (m[0], m[1])):
            running += step
            if running > limit and not over:
                report.limit_ledger.append((key, limit, running, wall))
            over = running > limit


def held_until_mono(ex):
    """When an execution stopped holding its job's keys: its end line, else its lease's end."""
    if ex.end is not None:
        return ex.end.mono
    if ex.lease_end_wall is not None:
        return ex.start.mono + (ex.lease_end_wall - ex.start.wall)
    return INF


def key_holders(jobs, runs):
    """{concurrency key: [(job, began mono, held until mono)]} from every execution."""
    holders = defaultdict(list)
    for job in jobs:
        for ex in runs.get(job.id, []):
            for key in job.keys:
                holders[key].append((job.id, ex.began_mono, held_until_mono(ex)))
    return holders


def key_full_s(job, keys, limits, holders, start, end):
    """Seconds of [start, end] during which one of `keys` had its limit of other jobs running.

    The engine parks a job behind a full key until a holder ends: that wait
    is queueing, which the recovery bound leaves out (docs/reliability.md).
    """
    spans = {key: [(max(a, start), min(b, end)) for other, a, b in holders.get(key, [])
                   if other != job and a < end and b > start]
             for key in keys if key in limits}
    cuts = sorted({start, end, *(t for ranges in spans.values() for span in ranges for t in span)})
    full = 0.0
    for left, right in zip(cuts, cuts[1:], strict=False):
        middle = (left + right) / 2
        if any(sum(a <= middle < b for a, b in ranges) >= limits[key]
               for key, ranges in spans.items()):
            full += right - left
    return full


def _check_recovery(report, evidence, runs):
    """Per fault: how long until the last of the jobs it took down was claimed again.

    A claim is seen first either by the sampler (RUNNING under a new token) or
    in the ledger (an execution began); the earlier of the two counts. Each
    figure says where the time went: until the event that ended the lost
    lease (a rescue, or the retry of a crashed child), then until the claim.

    A download always carries two keys (its user's, limit 2, and its asset's,
    limit 1) that other downloads hold meanwhile, so once rescued it waits
    for capacity, which is queueing, not recovery: for a download the bound
    holds the rescue, and the claim is reported beside it, unbounded.
    """
    finished_by = {job.id: (job.result or {}).get("token") for job in evidence.jobs}
    downloads = {job.id for job in evidence.jobs if not job.writes_ledger}
    silent_successes = {job.id for job in evidence.jobs
                        if not job.writes_ledger and job.status == "SUCCESSFUL"}
    status_of = {job.id: job.status for job in evidence.jobs}
    keys_of = {job.id: job.keys for job in evidence.jobs}
    holders = key_holders(evidence.jobs, runs)
    ended_at = defaultdict(list)
    for event in evidence.events:
        if event.kind in LEASE_ENDING:
            ended_at[event.job].append(event.wall)
    seen = defaultdict(list)
    for (job, token), mono in evidence.claims_seen.items():
        seen[job].append((mono, token))
    for job, job_runs in runs.items():
        seen[job] += [(ex.began_mono, ex.token) for ex in job_runs]
    for fault in evidence.faults:
        if not fault.held:
            continue
        worst = claimed = None
        for job, token in fault.held:
            if finished_by.get(job) == token:
                # Nobody took the job over: its own execution finished it once
                # the worker was back. Fine if that came within the bound (a
                # short pause, an orphaned child finishing); else the job
                # waited for its worker instead of being recovered.
                own = next((ex for ex in runs.get(job, []) if ex.token == token), None)
                done = own.end.mono if own is not None and own.end is not None else None
                if done is None or done - fault.mono <= report.bound_s + report.slack_s:
                    continue
                if worst is None or done - fault.mono > worst[0]:
                    worst = (done - fault.mono, job, "never: it waited for its own worker")
                continue
            later = [mono for mono, other in seen[job] if other != token and mono > fault.mono]
            if not later and job in silent_successes and not any(
                    w >= fault.wall for w in ended_at[job]):
                # A download's result names no execution: with no claim after the
                # fault and no lease ended by it, its own attempt finished it.
                continue
            ended = min((w for w in ended_at[job] if w >= fault.wall), default=None)
            if not later and ended is not None and status_of[job] in ("FAILED", "CANCELLED"):
                # Its attempts were spent: the rescue that ended the lost lease
                # finished the job (failed), and nothing was left to run again.
                seconds = ended - fault.wall
                if worst is None or seconds > worst[0]:
                    worst = (seconds, job, round(seconds, 2))
                continue
            if not later:
                report.unrecovered.append((fault.kind, fault.target, job))
                continue
            seconds = min(later) - fault.mono
            if ended is not None:
                # Time its key was full after the rescue is queueing, not recovery.
                seconds -= key_full_s(job, keys_of.get(job, ()), evidence.limits, holders,
                                      fault.mono + (ended - fault.wall), min(later))
            ended_s = None if ended is None else round(ended - fault.wall, 2)
            if job in downloads and fault.loses_worker and ended is not None:
                if claimed is None or seconds > claimed[0]:
                    claimed = (seconds, job, ended_s)
                seconds = min(seconds, ended - fault.wall)  # bounded: until the rescue
            if worst is None or seconds > worst[0]:
                worst = (seconds, job, ended_s)
        if claimed is not None:
            report.reclaims.append((fault.kind, fault.target, claimed[0],
                                    {"job": claimed[1], "lease ended after s": claimed[2]}))
        if worst is not None:
            seconds, job, ended_s = worst
            # Only a lost worker is bound by lease + rescue + poll; a crashed
            # child's job is retried after a backoff, and may then wait for its key.
            figures = report.recoveries if fault.loses_worker else report.reclaims
            figures.append((fault.kind, fault.target, seconds,
                            {"job": job, "lease ended after s": ended_s}))


def _check_enqueue(report, evidence):
    numbers = Counter(job.n for job in evidence.jobs if job.n is not None)
    report.missing_acked = sorted(evidence.acked - set(numbers))
    twice = sum(1 for count in numbers.values() if count > 1)
    if twice:
        # A refused enqueue whose commit went through after all, then retried.
        report.notes.append(f"{twice} jobs were enqueued twice after a refusal")
    refused = [(s, err) for s, err in evidence.enqueue_calls if err]
    report.enqueue_refused = len(refused)
    report.enqueue_slowest_s = max((s for s, _ in evidence.enqueue_calls), default=0.0)
    report.enqueue_hangs = [(round(s, 2), err or "answered") for s, err in evidence.enqueue_calls
                            if s > ENQUEUE_HANG_S]


def _check_assets(report, evidence):
    """Once the queue drained, no asset may still be held, and a ready file must be whole."""
    for asset in evidence.assets:
        if asset.state == "downloading":
            report.stuck_assets.append((asset.id, asset.holder))
        elif asset.state == "ready" and asset.intact is False:
            report.corrupt_assets.append(asset.id)


def _check_staging(report, evidence):
    """A staging folder may outlive its fetch only as a paused download's partial."""
    for folder, names in evidence.staging:
        if not (folder.isdigit() and int(folder) in evidence.paused_assets):
            report.leftover_staging.append((folder, sorted(names)))
