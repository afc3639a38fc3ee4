"""The admin's dashboard in a real browser, with known jobs run by a real `runworker`: each chart
column holds the rollup's numbers for its minute, hovering says them, the totals follow a second
worker's jobs without a reload, and the page fits a phone and a laptop."""

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import JobRollup, QueueSample
from tests.acceptance.conftest import spawn_worker  # noqa: F401 - a fixture
from tests.e2e.conftest import LAPTOP, PHONE, sideways_overflow

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DASHBOARD = reverse("admin:jobs_job_dashboard")


def run_burst(spawn_worker):  # noqa: F811
    worker = spawn_worker("--burst", "--concurrency", "4")
    assert worker.wait(120) == 0, worker.output()


def rollup_by_minute():
    """{minute ISO: {outcome: n}} summed over queues and kinds, as the chart's columns hold them."""
    found = {}
    for row in JobRollup.objects.all():
        slot = found.setdefault(row.minute.isoformat(), dict.fromkeys(
            ("succeeded", "failed", "cancelled", "retried"), 0))
        for name in slot:
            slot[name] += getattr(row, name)
    return found


def chart_columns(page, chart, parts):
    """{slot ISO: {part: number}} for the columns of `chart` that show anything."""
    columns = page.eval_on_selector_all(
        f"#chart-{chart} g.column",
        "(gs, parts) => gs.map(g => [g.dataset.slot, Object.fromEntries(parts.map(p => [p, g.dataset[p]]))])",
        parts)
    return {slot: {p: int(float(v)) for p, v in values.items()} for slot, values in columns
            if any(v not in ("", "0") for v in values.values())}


def test_the_dashboard_charts_the_rollup_a_real_worker_wrote(live_server, page, staff_user, log_in,
                                                             screenshot, spawn_worker):  # noqa: F811
    for n in range(6):
        services.enqueue("tests.noop", {"n": n})
    for n in range(2):
        services.enqueue("tests.fail_permanent", {"n": n})
    services.enqueue("tests.fail_value_error", {})  # retried once, then failed
    for n in range(3):
        services.enqueue("tests.echo", {"n": n})
    services.enqueue("tests.other_queue", {})
    run_burst(spawn_worker)

    expected = rollup_by_minute()
    assert sum(v["succeeded"] for v in expected.values()) == 10
    assert sum(v["failed"] for v in expected.values()) == 3
    log_in(page, staff_user)
    page.set_viewport_size({"width": LAPTOP, "height": 900})
    page.goto(f"{live_server.url}{DASHBOARD}")

    outcomes = ["succeeded", "failed", "cancelled", "retried"]
    shown = chart_columns(page, "finished", outcomes)
    assert shown == {slot: values for slot, values in expected.items() if any(values.values())}
    slot, values = next(iter(shown.items()))
    title = page.locator(f'#chart-finished g.column[data-slot="{slot}"] title').text_content()
    assert f"succeeded {values['succeeded']}, failed {values['failed']}" in title
    assert page.inner_text('[data-total="finished"]') == "13"
    assert page.inner_text('[data-total="failed"]') == "3"
    assert page.inner_text('[data-total="retried"]') == "1"
    # The queue's depth as the worker sampled it when it started.
    samples = {}
    for sample in QueueSample.objects.all():
        samples[sample.minute.isoformat()] = samples.get(sample.minute.isoformat(), 0) + sample.ready
    assert samples, "the worker took no sample"
    depth = chart_columns(page, "depth", ["ready"])
    assert depth == {slot: {"ready": n} for slot, n in samples.items() if n}
    # Screen readers get the same numbers as a table.
    table = page.locator("#chart-finished table").inner_text().lower()
    assert "succeeded" in table and str(values["succeeded"]) in table
    kinds = page.locator("#slowest-kinds tbody tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert set(kinds) == {"tests.noop", "tests.fail_permanent", "tests.fail_value_error", "tests.echo",
                          "tests.other_queue"}
    screenshot(page, f"dashboard-{LAPTOP}")
    assert sideways_overflow(page) <= 0

    # One kind: its numbers alone.
    page.select_option("select[name=kind]", "tests.echo")
    page.click("#dashboard-filters button[type=submit]")
    page.wait_for_url("**kind=tests.echo**")
    assert page.inner_text('[data-total="finished"]') == "3"

    # Live: a second worker's jobs appear without a reload while the tab is visible.
    page.goto(f"{live_server.url}{DASHBOARD}")
    assert page.is_checked("#live-refresh")
    for n in range(4):
        services.enqueue("tests.noop", {"again": n})
    run_burst(spawn_worker)
    page.wait_for_function("document.querySelector('[data-total=finished]').textContent === '17'",
                           timeout=30_000)

    page.set_viewport_size({"width": PHONE, "height": 844})
    page.goto(f"{live_server.url}{DASHBOARD}?range=day")
    shot = screenshot(page, f"dashboard-day-{PHONE}")
    assert sideways_overflow(page) <= 0, shot
    assert page.locator("#chart-finished g.column").count() == 96  # 15-minute slots
    page.goto(f"{live_server.url}{DASHBOARD}")
    screenshot(page, f"dashboard-{PHONE}")
    assert sideways_overflow(page) <= 0


def test_only_staff_reach_the_dashboard(client, user, staff_user):
    client.force_login(user)
    assert client.get(DASHBOARD).status_code == 302  # to the admin's login
    client.force_login(staff_user)
    assert client.get(DASHBOARD + "?range=year&queue=%00x&kind=" + "k" * 500).status_code in (200, 400)
    assert client.get(DASHBOARD + "?range=year&queue=nope&kind=nope").status_code == 200
