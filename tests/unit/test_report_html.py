"""report.html and the client-scaling figures, without a browser: the page is
written by `dbtester analyze`, is self-contained, escapes what the test case
says, and holds the table, every chart and the environment; client_steps runs
get per-step rows and scaling charts (SVG and interactive). The browser test
is tests/e2e/test_report.py."""

from __future__ import annotations

import html
import json
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dbtester.analyze import analyze
from dbtester.analyze.data import DatabaseData
from dbtester.analyze.figures import Figures, Series, compute, step_row, table_rows, unstepped
from dbtester.analyze.steps import SCALING_SERIES, add_steps, client_steps
from dbtester.publish.readme import published_readme
from dbtester.report.charts import CHARTS, HEATMAP, drawn, render_charts
from dbtester.report.table import format_value
from dbtester.results import DatabaseRecord, LoadWindow, Records, ResultsDir
from tests.conftest import ROOT
from tests.support.data import make_trials

V1 = ROOT / "tests" / "fixtures" / "results-v1"
START = 1_800_000_000.0
STEPS = (1, 10, 100)


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    return Path(shutil.copytree(V1, tmp_path / "run"))


def _sections(page: str) -> list[str]:
    return re.findall(r'<section class="chart" id="chart-([^"]+)">', page)


def test_analyze_writes_a_self_contained_report(run_cli: Any, v1: Path) -> None:
    result = run_cli("analyze", str(v1))
    assert result.code == 0, result.err
    report = v1 / "report.html"
    assert f"report: {report}" in result.err
    page = report.read_text()
    # nothing fetched: no external script, stylesheet or frame, and a policy
    # that lets the browser load nothing from anywhere
    assert not re.search(r"<(script|link|iframe|img)[^>]+(src|href)=", page)
    assert "default-src 'none'" in page
    assert "Bokeh" in page and len(page) < 5_000_000
    # every chart the SVGs have, in the same order, and each in the plots' data
    analysis = analyze(ResultsDir(v1).load())
    charts = [c.name for c in drawn(analysis.figures)]
    assert _sections(page) == charts and len(charts) == 20
    for name in charts:
        if name != HEATMAP.name:
            assert f'"name":"{name}"' in page
    # the heatmap: a plot of its own for each database
    assert len(analysis.labels) == 2
    for index in range(2):
        assert f'"name":"heatmap-database-{index}"' in page
    # every note, labelled as in the README, after the summary
    notes = analysis.notes
    assert notes
    listed = page.split('<ul class="notes">', 1)[1].split("</ul>", 1)[0]
    assert listed == "".join(f"<li><strong>Note</strong>: {html.escape(n)}</li>" for n in notes)
    assert page.index('<ul class="summary">') < page.index('<ul class="notes">')
    # the table as summary.txt has it, row for row and cell for cell
    table = (v1 / "summary.txt").read_text()
    for line in table.splitlines():
        if line.startswith("|") and line.split("|")[1].strip():
            row, *cells = (c.strip() for c in line.split("|")[1:-1])
            expected = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
            assert f"<tr><th>{html.escape(row)}</th>{expected}</tr>" in page, row
    # ... grouped: each group's heading once, in ROW_GROUPS' order, above its rows
    groups = re.findall(r'<tr class="group"><th colspan="3">([^<]+)</th></tr>', page)
    assert groups == ["Throughput", "Latency", "Server", "Disk", "Client", "Checks"]
    body = page.split('<table class="figures">', 1)[1].split("</table>", 1)[0]
    at = {g: body.index(f">{g}</th>") for g in groups}
    assert at["Latency"] < body.index("<th>Latency p99</th>") < at["Server"]
    assert at["Disk"] < body.index("<th>SERVER-AVG-DISK-SPACE-USAGE</th>") < at["Client"]
    # the environment and the test case as it ran
    environment = json.loads((v1 / "result.json").read_text())["environment"]
    assert html.escape(environment["kernel"]) in page
    assert html.escape((v1 / "config.yaml").read_text()) in page
    # the README links it; the published README links the bucket's copy
    readme = (v1 / "README.md").read_text()
    assert "[report.html](report.html)" in readme
    published = published_readme(readme, "https://storage.googleapis.com/b/p")
    assert "(https://storage.googleapis.com/b/p/report.html)" in published


def test_without_charts_the_figures_are_written_and_nothing_drawn(run_cli: Any, v1: Path) -> None:
    for drawn_before in (v1 / "charts", v1 / "report.html"):
        if drawn_before.is_dir():
            shutil.rmtree(drawn_before)
        drawn_before.unlink(missing_ok=True)
    result = run_cli("analyze", str(v1), "--no-charts")
    assert result.code == 0, result.err
    assert not (v1 / "charts").exists() and not (v1 / "report.html").exists()
    assert "report:" not in result.err
    # the table and the summary as with charts; the README links nothing undrawn
    table = (v1 / "summary.txt").read_text()
    assert result.out.startswith(table) and "AVG-THROUGHPUT" in table
    assert ResultsDir(v1).read_summary() is not None
    readme = (v1 / "README.md").read_text()
    assert table.strip() in readme
    assert ".svg" not in readme and "report.html" not in readme
    # drawn later, on request
    assert run_cli("analyze", str(v1)).code == 0
    assert (v1 / "report.html").is_file() and "report.html" in (v1 / "README.md").read_text()


def test_what_the_test_case_says_is_escaped(run_cli: Any, v1: Path) -> None:
    config = (v1 / "config.yaml").read_text()
    hostile = "<script>alert(1)</script>"
    text = re.sub(r"(?m)^title: .*$", f"title: '{hostile} & more'", config)
    text = text.replace("description: etcd v3.5.17", f"description: 'a @x $y {hostile}'")
    (v1 / "config.yaml").write_text(text)
    assert run_cli("analyze", str(v1)).code == 0
    page = (v1 / "report.html").read_text()
    assert hostile not in page
    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt; &amp; more</h1>" in page
    assert "<th>a @x $y &lt;script&gt;alert(1)&lt;/script&gt;</th>" in page
    # (that the tooltips show '@x' as typed, not as a field, the browser test checks)


def test_trials_show_intervals_and_verdicts(run_cli: Any, tmp_path: Path) -> None:
    run = make_trials(
        tmp_path / "run", {"etcd-v3.5": [1.0, 1.02, 0.98], "etcd-v3.6": [1.3, 1.32, 1.28]}
    )
    assert run_cli("analyze", str(run)).code == 0
    page = (run / "report.html").read_text()
    assert "<h3>Compared with etcd v3.5.17</h3>" in page
    # 3.6 took 30% longer: significantly slower in throughput, in red
    row = re.search(r"<tr><td>etcd v3.6.8</td><td>AVG-THROUGHPUT</td>(.*?)</tr>", page)
    assert row is not None
    assert '<td class="verdict worse">slower</td>' in row[1]
    assert re.search(r"<td>-2\d\.\d%</td>", row[1])
    assert "±" in page  # the table's intervals
    assert "THROUGHPUT-BY-TRIAL" in _sections(page)


# --------------------------------------------------------------------------- client steps


def _stepped(latencies_ms: tuple[float, ...] = (2.0, 4.0, 8.0), per_step: int = 1000) -> Any:
    """Three steps of ``per_step`` requests, one after the other, each one
    second long, every request of step k taking ``latencies_ms[k]`` (one in
    each step failing); members sampled every second, member m at 10 * t + m %."""
    due, latency, step, code = [], [], [], []
    for k, ms in enumerate(latencies_ms):
        starts = START + k + np.arange(per_step) / per_step
        due.append((starts * 1e9).astype(np.int64))
        latency.append(np.full(per_step, int(ms * 1e6), np.int64))
        step.append(np.full(per_step, k, np.uint16))
        codes = np.zeros(per_step, np.uint8)
        codes[0] = 1
        code.append(codes)
    records = Records(
        np.concatenate(due),
        np.concatenate(latency),
        np.concatenate(latency),
        np.concatenate(code),
        np.concatenate(step),
        ["ok", "UNAVAILABLE"],
    )
    servers = [
        pd.DataFrame({"t": np.arange(0.0, 5.0), "cpu_percent": 10.0 * np.arange(0.0, 5.0) + m})
        for m in range(2)
    ]
    record = DatabaseRecord(
        run_id="run",
        database={"id": "db", "workload": {"client_steps": list(STEPS)}},
        started_unix=START,
        load=LoadWindow(started_unix=START, ended_unix=START + 3, workers=1, cpu_seconds=1.0),
    )
    return DatabaseData("db", "db", record, records, None, servers)


def test_each_step_has_its_rows_and_scaling_series() -> None:
    data = _stepped()
    figures = Figures()
    add_steps(data, figures)
    v = figures.values
    for k, clients in enumerate(STEPS):
        ms = (2.0, 4.0, 8.0)[k]
        # 999 answered requests from the step's first due time to its last reply
        span = 0.999 + ms / 1000
        assert v[step_row(clients, "AVG-THROUGHPUT")] == pytest.approx(999 / span, rel=1e-5)
        assert v[step_row(clients, "Latency p50")] == pytest.approx(ms)
        assert v[step_row(clients, "Latency p99")] == pytest.approx(ms)
        # samples at t = k+1 and k+2 cover the step's second (and the one after
        # its last reply): the busier member's, 10 * (k + 2) + 1
        assert v[step_row(clients, "SERVER-MAX-CPU-USAGE")] == pytest.approx(10 * (k + 2) + 1)
    throughput = figures.series[SCALING_SERIES["AVG-THROUGHPUT"]]
    assert list(throughput.x) == [1.0, 10.0, 100.0]
    assert list(figures.series[SCALING_SERIES["Latency p99"]].y) == pytest.approx([2, 4, 8])


def test_steps_come_only_from_runs_with_two_or_more() -> None:
    one = _stepped()
    record = one.record.model_copy(update={"database": {"workload": {"client_steps": [5]}}})
    figures = Figures()
    add_steps(DatabaseData("db", "db", record, one.records, None, one.servers), figures)
    assert figures.values == {} and figures.series == {}
    for database in ({}, {"workload": {"client_steps": ["1", 2]}}, {"workload": [1]}):
        assert client_steps(one.record.model_copy(update={"database": database})) == ()


def _with_steps() -> Figures:
    """The whole run's figures (its server samples have only CPU: left out),
    then the steps'."""
    data = _stepped()
    figures = compute(replace(data, servers=[]))
    add_steps(data, figures)
    return figures


def test_step_rows_follow_the_table_and_read_like_their_row() -> None:
    figures = _with_steps()
    rows = table_rows([figures])
    stepped = [r for r in rows if unstepped(r)]
    assert rows[-len(stepped) :] == stepped  # at the end, by client count
    assert stepped[:4] == [
        "CLIENTS-1-AVG-THROUGHPUT",
        "CLIENTS-1-Latency p50",
        "CLIENTS-1-Latency p99",
        "CLIENTS-1-SERVER-MAX-CPU-USAGE",
    ]
    assert stepped[-1] == "CLIENTS-100-SERVER-MAX-CPU-USAGE"
    assert format_value("CLIENTS-10-Latency p50", 4.0) == format_value("Latency p50", 4.0)
    assert format_value("CLIENTS-10-AVG-THROUGHPUT", 999.0) == "999 req/sec"
    assert unstepped("CLIENTS-10-SOMETHING") is None and unstepped("AVG-THROUGHPUT") is None


def test_scaling_charts_are_svg_on_a_log_axis_of_client_counts(tmp_path: Path) -> None:
    figures = _with_steps()
    scaling = [c for c in CHARTS if c.log_x]
    assert {c.name for c in scaling} == set(SCALING_SERIES.values())
    assert all(c in drawn([figures]) for c in scaling)
    assert not any(c in drawn([compute(replace(_stepped(), servers=[]))]) for c in scaling)
    written = render_charts(lambda name: tmp_path / f"{name}.svg", ["db"], [figures])
    chart = tmp_path / f"{SCALING_SERIES['Latency p99']}.svg"
    assert chart in written
    svg = chart.read_text()
    assert ET.fromstring(svg).tag.endswith("svg")
    # ticked at the client counts themselves, not at powers of ten
    for label in ("1", "10", "100"):
        assert re.search(rf">{label}</text>", svg), label
    assert "10^{" not in svg


def test_a_stepped_results_directory_renders_steps_everywhere(run_cli: Any, v1: Path) -> None:
    """The real v1 run, its requests split into three steps in due-time order."""
    store = ResultsDir(v1)
    for db_id in ("etcd-v3.5", "etcd-v3.6"):
        layout = store.database(db_id)
        records = Records.load(layout.requests)
        order = np.argsort(records.due_ns, kind="stable")
        step = np.empty(len(records), np.uint16)
        step[order] = np.arange(len(records)) * len(STEPS) // len(records)
        records.step = step
        records.save(layout.requests)
        raw = json.loads(layout.record.read_text())
        raw["database"]["workload"]["client_steps"] = list(STEPS)
        layout.record.write_text(json.dumps(raw))
    result = run_cli("analyze", str(v1))
    assert result.code == 0, result.err
    table = (v1 / "summary.txt").read_text()
    for clients in STEPS:
        line = next(x for x in table.splitlines() if f" CLIENTS-{clients}-AVG-THROUGHPUT " in x)
        assert line.count("req/sec") == 2
    for name in SCALING_SERIES.values():
        assert (v1 / "charts" / f"{name}.svg").is_file()
    page = (v1 / "report.html").read_text()
    assert set(SCALING_SERIES.values()) <= set(_sections(page))
    assert "<th>CLIENTS-100-Latency p99</th>" in page
    summary = json.loads((v1 / "result.json").read_text())
    assert all("CLIENTS-10-Latency p50" in db["figures"] for db in summary["databases"])


def test_fault_windows_are_shaded_on_charts_over_time_only(tmp_path: Path) -> None:
    from bokeh.models.annotations import BoxAnnotation, Label

    from dbtester.report.interactive import _plot
    from dbtester.results import FaultSummary

    seconds = np.arange(0, 30, dtype=float)
    figures = Figures()
    figures.series["AVG-THROUGHPUT"] = Series(seconds, np.full(30, 1000.0))
    figures.series["AVG-LATENCY-MS-BY-KEY"] = Series(seconds * 1000, np.full(30, 2.0))
    figures.faults = [
        FaultSummary(
            number=1,
            action="kill",
            target="leader",
            member=2,
            undo="restart",
            start_s=10.02,
            end_s=20.4,
            unavailable_s=1.0,
            unavailable_from_s=10.0,
            recovered=True,
        ),
        FaultSummary(
            number=2,
            action="pause",
            target="0",
            member=0,
            start_s=25.0,
            unavailable_s=0.1,
            unavailable_from_s=25.0,
            recovered=True,
        ),
    ]
    render_charts(lambda name: tmp_path / f"{name}.svg", ["db"], [figures])
    over_time = (tmp_path / "AVG-THROUGHPUT.svg").read_text()
    assert "fault 1: kill leader" in over_time and "fault 2: pause 0" in over_time
    assert "fault 1" not in (tmp_path / "AVG-LATENCY-MS-BY-KEY.svg").read_text()

    (chart,) = [c for c in CHARTS if c.name == "AVG-THROUGHPUT"]
    plot = _plot(chart, ["db"], [figures])
    boxes = [(b.left, b.right) for b in plot.center if isinstance(b, BoxAnnotation)]
    assert boxes[0] == (10.02, 20.4)
    assert boxes[1][0] == 25.0  # no end: runs off the right edge
    labels = [x.text for x in plot.center if isinstance(x, Label)]
    assert labels == ["fault 1: kill leader", "fault 2: pause 0"]
