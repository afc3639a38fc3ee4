"""Medians of the runs, as a markdown table and as JSON."""

import json
import statistics

# A 1-minute load average above this before the run means someone else was busy.
BUSY_LOAD = 0.5

# (key, column heading, unit kind) in table order.
FIGURES = [
    ("enqueue", "enqueue 1-by-1 (jobs/s)", "rate"),
    ("enqueue_atomic", "enqueue 1-by-1 in one transaction (jobs/s)", "rate"),
    ("bulk_enqueue", "bulk enqueue (jobs/s)", "rate"),
    ("throughput_1", "throughput 1 proc (jobs/s)", "rate"),
    ("throughput_2", "throughput 2 procs (jobs/s)", "rate"),
    ("latency_p50_ms", "latency p50 ms", "ms"),
    ("latency_p95_ms", "latency p95 ms", "ms"),
]


def medians(runs):
    """figure -> median over the runs that produced it (None when none did)."""
    result = {}
    for key, _, _ in FIGURES:
        values = [run[key] for run in runs if run.get(key) is not None]
        result[key] = statistics.median(values) if values else None
    return result


def cell(system, key, kind):
    if system.get("unavailable"):
        return "—"
    value = system["median"].get(key)
    if value is None:
        if (key == "bulk_enqueue" and not system["has_bulk"]
                or key == "enqueue_atomic" and not system.get("has_transaction")):
            return "n/a"
        return "failed"
    return f"{value:,.0f}" if kind == "rate" else f"{value:,.1f}"


def markdown(report):
    lines = [
        "| system | " + " | ".join(heading for _, heading, _ in FIGURES) + " |",
        "| --- |" + " ---: |" * len(FIGURES),
    ]
    for system in report["systems"].values():
        cells = [cell(system, key, kind) for key, _, kind in FIGURES]
        lines.append(f"| {system['title']} | " + " | ".join(cells) + " |")
    lines.append("")
    for system in report["systems"].values():
        versions = ", ".join(f"{name} {version}" for name, version in system["versions"].items())
        if system.get("unavailable"):
            lines.append(f"- **{system['title']}**: not measured: {system['unavailable']}")
            continue
        runs = f"{len(system['runs'])} run(s)"
        errors = f"; {len(system['errors'])} failed trial(s)" if system["errors"] else ""
        lines.append(f"- **{system['title']}** ({versions}; {runs}{errors}): {system['configuration']}")
    method = report["method"]
    lines += [
        "",
        f"Method: {method['jobs']:,} no-op jobs per enqueue and throughput figure "
        f"(bulk in chunks of {method['bulk_size']:,}), {method['latency_jobs']} latency jobs "
        f"at {method['rate']:g}/s into one idle worker, medians of {method['repeat']} run(s), "
        "the systems taking turns run by run; "
        f"PostgreSQL {report['postgres']['version']} on loopback "
        f"({', '.join(f'{k}={v}' for k, v in report['postgres']['settings'].items())}), "
        f"a fresh database per trial; Django peers with CONN_MAX_AGE="
        f"{method['conn_max_age_s']} s; Python {report['python']}, {report['cpus']} CPUs.",
    ]
    load = report["load_average_1m_before"]
    if load > BUSY_LOAD:
        lines.append(
            f"Note: the 1-minute load average was {load:.1f} on {report['cpus']} CPUs before the "
            "run started: other work shared the machine, so these figures are noisy."
        )
    return "\n".join(lines)


def write_json(report, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
