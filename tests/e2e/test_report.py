"""The interactive report of a real run, published to a file:// destination
and opened there in headless Chromium (Debian's, driven by Playwright): every
plot renders, nothing is fetched from anywhere, nothing logs an error,
hovering a line shows its value, a box drag zooms, the checkboxes switch a
database off in every plot. The run is a client-scaling one (three client
steps, two etcd versions), so the scaling rows and charts are checked too.

A screenshot of the page is saved in the test's temp dir (report.png)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dbtester.analyze.figures import DB_SIZE_SERIES, step_row
from dbtester.analyze.steps import SCALING_SERIES
from dbtester.report.charts import STANDARD
from tests.support.cases import database, make_case
from tests.support.cluster import dbtester

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
VERSIONS = ("3.5.17", "3.6.8")
STEPS = (2, 8, 32)
#: the first database's column label: '@' and '$' name fields in a tooltip template
TRICKY = "etcd 3.5 @x $y <b>"
#: every standard chart, the four scaling ones, the host-speed probe's, the
#: latency heatmap and etcd's database size's two (one trial: no
#: THROUGHPUT-BY-TRIAL)
SECTIONS = len(STANDARD) + len(SCALING_SERIES) + 2 + len(DB_SIZE_SERIES)
#: the heatmap's section holds a plot for each database
HEATMAPS = len(VERSIONS)
PLOTS = SECTIONS - 1 + HEATMAPS
NUMBER = re.compile(r"^-?[0-9][0-9,]*(\.[0-9]+)?$")


def _case() -> dict[str, object]:
    load = {"requests": 3000, "clients": STEPS[-1], "connections": 8, "client_steps": list(STEPS)}
    return make_case(
        title="e2e report: clients 2 to 32",
        description="etcd 3.5 vs 3.6, one member each, three client steps",
        workload=load,
        databases=[
            database(f"etcd-{v}", version=v, **({"description": TRICKY} if i == 0 else {}))
            for i, v in enumerate(VERSIONS)
        ],
    )


@pytest.fixture(scope="module")
def published(installed_home: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run's results, published to a file:// destination: that copy is
    what a reader opens."""
    for version in VERSIONS:
        home = Path(installed_home("etcd", version))
    root = tmp_path_factory.mktemp("report")
    config = root / "case.yaml"
    config.write_text(yaml.safe_dump(_case()))
    out = root / "results"
    run = dbtester(home, "run", str(config), "--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    # make demo's last line says where the report is
    assert run.stderr.rstrip().splitlines()[-1] == f"report: {out / 'report.html'}"
    bucket = root / "bucket"
    done = dbtester(home, "publish", str(out), f"file://{bucket}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (bucket / "report.html").read_bytes() == (out / "report.html").read_bytes()
    return bucket


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make system` (scripts/setup-system.sh) installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Debian's Chromium: `playwright install` would download one from elsewhere
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield launched
        finally:
            launched.close()


def test_the_run_has_scaling_rows_and_charts(published: Path) -> None:
    table = (published / "summary.txt").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if "|" in line}
    throughput = {}
    for clients in STEPS:
        for row in ("AVG-THROUGHPUT", "Latency p50", "Latency p99", "SERVER-MAX-CPU-USAGE"):
            cells = [c.strip() for c in rows[step_row(clients, row)].split("|")[2:-1]]
            assert len(cells) == 2 and all(c and c != "-" for c in cells), (clients, row, cells)
        cells = rows[step_row(clients, "AVG-THROUGHPUT")].split("|")[2:-1]
        throughput[clients] = [float(c.split()[0].replace(",", "")) for c in cells]
    # 16 times the clients in flight: etcd batches them into its fsyncs (its
    # group commit, not a timing dbtester promises: with 2 clients a write
    # waits for its own fsync, with 32 the fsync is shared; each column is
    # one trial, its two steps run back to back on the same machine)
    assert all(a < b for a, b in zip(throughput[STEPS[0]], throughput[STEPS[-1]], strict=True))
    for name in SCALING_SERIES.values():
        assert (published / "charts" / f"{name}.svg").stat().st_size > 1000


def test_the_published_report_works_offline_in_a_browser(
    published: Path, browser: Any, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto((published / "report.html").as_uri())
    page.wait_for_function(
        "() => window.Bokeh !== undefined && Bokeh.documents.length == 1"
        " && Bokeh.documents[0].is_idle",
        timeout=60_000,
    )
    try:
        _every_plot_rendered(page)
        _heatmaps_count_every_request(page, published)
        _hover_shows_a_value(page)
        _box_zoom_zooms(page)
        _checkboxes_switch_a_database_off(page)
    finally:
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        page.close()
    assert problems == []
    # the page itself and nothing else (images it draws are data: or blob: URLs)
    others = [url for url in requests if not url.startswith(("data:", "blob:"))]
    assert others == [(published / "report.html").as_uri()]
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert (published / "report.html").stat().st_size < 5_000_000


def _every_plot_rendered(page: Any) -> None:
    sections = page.locator("section.chart")
    assert sections.count() == SECTIONS
    assert page.evaluate("() => Bokeh.documents[0].roots().length") == PLOTS
    # each root has a view, drawn onto a canvas of the section's width, and
    # data for both databases (a heatmap: for its own)
    assert page.locator(".bk-Figure").count() == PLOTS
    with_data = page.evaluate(
        "() => Bokeh.documents[0].roots().map(plot => new Set(plot.renderers"
        ".filter(r => r.data_source && r.data_source.get_length() > 0)"
        ".map(r => r.tags[0])).size)"
    )
    assert with_data.count(1) == HEATMAPS and with_data.count(2) == PLOTS - HEATMAPS
    for i in range(SECTIONS):
        section = sections.nth(i)
        box = section.bounding_box()
        assert box is not None and box["width"] > 600 and box["height"] > 300
        shot = section.screenshot()
        assert len(shot) > 5_000, section.get_attribute("id")  # a blank plot compresses to less
    for name in SCALING_SERIES.values():
        assert page.locator(f"#chart-{name}").count() == 1


def _heatmaps_count_every_request(page: Any, published: Path) -> None:
    """Each database's heatmap cells add up to every request it made."""
    result = json.loads((published / "result.json").read_text())
    for index, db in enumerate(result["databases"]):
        cells: list[int] = page.evaluate(
            "name => Array.from(Bokeh.documents[0].get_model_by_name(name)"
            ".renderers[0].data_source.data.count)",
            f"heatmap-database-{index}",
        )
        assert sum(cells) == db["figures"]["TOTAL-REQUEST-NUMBER"], db["id"]
        assert min(cells) >= 1  # only the cells with requests are drawn


def _plot_centre(page: Any, name: str) -> tuple[float, float]:
    section = page.locator(f"#chart-{name}")
    section.scroll_into_view_if_needed()
    box = section.bounding_box()
    assert box is not None
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def _hover_shows_a_value(page: Any) -> None:
    # 100 points a line whatever the run's length (a per-second series of a
    # run this short has one or two)
    x, y = _plot_centre(page, "AVG-LATENCY-MS-BY-KEY")
    page.mouse.move(x, y)
    values = page.locator(".bk-Tooltip .hover-y")
    values.first.wait_for(state="visible", timeout=10_000)
    shown = values.all_inner_texts()
    assert len(shown) == 2 and all(NUMBER.match(v) for v in shown), shown
    # the column labels as typed, not read as tooltip fields or markup
    labels = page.locator(".bk-Tooltip .hover-database").all_inner_texts()
    assert sorted(labels) == sorted([TRICKY, f"etcd-{VERSIONS[1]}"]), labels
    page.mouse.move(0, 0)


def _x_range(page: Any, name: str) -> list[float]:
    found: list[float] = page.evaluate(
        "name => { const r = Bokeh.documents[0].get_model_by_name(name).x_range;"
        " return [r.start, r.end]; }",
        name,
    )
    return found


def _box_zoom_zooms(page: Any) -> None:
    name = SCALING_SERIES["Latency p99"]
    before = _x_range(page, name)
    x, y = _plot_centre(page, name)
    page.mouse.move(x - 150, y - 60)
    page.mouse.down()
    page.mouse.move(x + 50, y + 60, steps=5)
    page.mouse.up()
    after = _x_range(page, name)
    assert before[0] < after[0] < after[1] < before[1], (before, after)


def _checkboxes_switch_a_database_off(page: Any) -> None:
    visible = (
        "tag => [...Bokeh.documents[0].all_models]"
        ".filter(m => m.tags && m.tags.includes(tag)).map(m => m.visible)"
    )
    assert set(page.evaluate(visible, "database-0")) == {True}
    page.locator('input[data-database="database-0"]').uncheck()
    switched = page.evaluate(visible, "database-0")
    # a line (and hover target) in each plot, and markers on the scaling ones;
    # its own heatmap's cells
    assert len(switched) >= PLOTS - HEATMAPS + 1 and set(switched) == {False}
    assert set(page.evaluate(visible, "database-1")) == {True}
    page.locator('input[data-database="database-0"]').check()
    assert set(page.evaluate(visible, "database-0")) == {True}
