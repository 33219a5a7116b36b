"""The latency heatmap's counting (dbtester.analyze.heatmap): every request
in exactly one cell, at its due time and latency bucket; the modes, stalls
and fault windows it exists to show; its drawings (an SVG panel per
database, a plot per database in report.html)."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import numpy.typing as npt
import pytest
from bokeh.models import ColumnDataSource
from bokeh.models.renderers import GlyphRenderer

from dbtester.analyze.figures import Figures
from dbtester.analyze.heatmap import (
    BUCKETS_PER_DECADE,
    MAX_COLUMNS,
    column_width,
    latency_heatmap,
)
from dbtester.analyze.trials import combine
from dbtester.report.heatmap import draw_heatmap, heatmap_plot, highest
from dbtester.results import Records

START = 1_800_000_000.0


def _records(due_s: npt.ArrayLike, latency_ms: npt.ArrayLike, failed: int = 0) -> Records:
    due = (START * 1e9 + np.asarray(due_s, dtype=np.float64) * 1e9).astype(np.int64)
    latency = (np.asarray(latency_ms, dtype=np.float64) * 1e6).astype(np.int64)
    code = np.zeros(len(due), np.uint8)
    code[:failed] = 1
    step = np.zeros(len(due), np.uint16)
    return Records(due, latency, latency, code, step, ["ok", "TIMEOUT"])


def test_every_request_is_in_one_cell_at_its_time_and_latency() -> None:
    # a 5 s timeout (failed: it counts too) in second 3; 1 ms and 10 ms
    # requests before it (due times mid-column: the nanosecond clock at
    # 1.8e9 s holds them to about 0.3 µs)
    due = [3.55, 0.15, 0.25, 1.55, 2.55]
    latency = [5000.0, 1.0, 10.0, 1.0, 10.0]
    heatmap = latency_heatmap(_records(due, latency, failed=1), START)
    assert heatmap is not None
    assert heatmap.width_s == 0.1  # 3.5 s fits 0.1 s columns
    assert heatmap.columns == 36 and int(heatmap.counts.sum()) == 5
    # rows from the 1 ms bucket to the 5 s one, each ten a decade
    assert heatmap.edges_ms[0] == pytest.approx(1.0)
    assert heatmap.edges_ms[1] / heatmap.edges_ms[0] == pytest.approx(
        10 ** (1 / BUCKETS_PER_DECADE)
    )
    for due_s, ms in zip(due, latency, strict=True):
        row = int(np.searchsorted(heatmap.edges_ms, ms * (1 + 1e-9), side="right")) - 1
        column = int(due_s / heatmap.width_s)
        assert heatmap.counts[row, column] == 1, (due_s, ms)


def test_two_modes_and_a_stall_show() -> None:
    """10 s of requests at 1 ms and 20 ms (two modes), none answered fast in
    seconds 4-5 (a stall: 800 ms each)."""
    rng = np.random.default_rng(3)
    due = np.sort(rng.uniform(0, 10, 20_000))
    latency = np.where(rng.random(20_000) < 0.5, 1.0, 20.0)
    stalled = (due >= 4) & (due < 6)
    latency[stalled] = 800.0
    heatmap = latency_heatmap(_records(due, latency), START)
    assert heatmap is not None and heatmap.width_s == 0.1
    busy_rows = np.flatnonzero(heatmap.counts.sum(axis=1))
    assert len(busy_rows) == 3  # 1 ms, 20 ms, 800 ms and nothing between
    stall_columns = slice(40, 60)
    fast = heatmap.edges_ms[:-1] < 100
    assert int(heatmap.counts[fast][:, stall_columns].sum()) == 0
    assert int(heatmap.counts[~fast][:, stall_columns].sum()) == int(stalled.sum())


def test_columns_are_round_and_never_too_many() -> None:
    assert column_width(3.0) == 0.1
    assert column_width(60.0) == 0.25
    assert column_width(600.0) == 5.0
    assert column_width(86_400.0) == 600.0
    for span in (1.0, 59.9, 121.0, 3_601.0, 7 * 86_400.0):
        assert span / column_width(span) <= MAX_COLUMNS or column_width(span) == 1800.0


def test_latencies_outside_the_scale_land_in_its_end_buckets() -> None:
    heatmap = latency_heatmap(_records([0.0, 0.0], [0.0001, 10_000_000.0]), START)
    assert heatmap is not None
    assert int(heatmap.counts[0].sum()) == 1 and int(heatmap.counts[-1].sum()) == 1
    assert heatmap.edges_ms[0] == pytest.approx(0.01) and heatmap.edges_ms[-1] == 1e5


def test_no_records_no_heatmap() -> None:
    assert latency_heatmap(Records.empty(0), START) is None


def _figures(throughput: float, latency_ms: float) -> Figures:
    figures = Figures()
    figures.values["AVG-THROUGHPUT"] = throughput
    figures.heatmap = latency_heatmap(_records([0.0, 1.0], [latency_ms] * 2), START)
    return figures


def test_trials_show_the_median_trials_heatmap() -> None:
    trials = [_figures(100.0, 1.0), _figures(300.0, 3.0), _figures(200.0, 2.0)]
    combined, _ = combine(trials, [1, 2, 3])
    assert combined.heatmap is not None
    assert combined.heatmap.trial == 3  # 200/s: the median
    assert combined.heatmap.edges_ms[0] == pytest.approx(10 ** (np.floor(np.log10(2.0) * 10) / 10))


def test_the_svg_has_a_panel_per_database_and_stays_small(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    figures = []
    for _ in range(2):
        f = Figures()
        due = np.sort(rng.uniform(0, 100, 200_000))
        f.heatmap = latency_heatmap(_records(due, rng.lognormal(0, 1, 200_000)), START)
        figures.append(f)
    figures.append(Figures())  # a database without records
    path = tmp_path / "LATENCY-HEATMAP.svg"
    draw_heatmap(["a", "b", "c"], figures, path, "Latency heatmap")
    text = path.read_text()
    root = ET.fromstring(text)
    assert root.tag.endswith("svg")
    assert "c: no data" in text  # named, not silently missing
    # a panel's cells are one embedded image, and its colour bar another,
    # whatever the cell count
    assert text.count("<image") == 4
    assert path.stat().st_size < 1_000_000


def test_the_html_plot_holds_every_nonempty_cell() -> None:
    f = Figures()
    f.heatmap = latency_heatmap(_records([0.0, 0.05, 2.0], [1.0, 1.0, 50.0]), START)
    assert f.heatmap is not None
    plot = heatmap_plot("Latency heatmap", "a", f.heatmap, [f], highest([("a", f.heatmap)]), "t")
    (cells,) = plot.renderers
    assert isinstance(cells, GlyphRenderer)
    assert isinstance(cells.data_source, ColumnDataSource)
    assert list(cells.data_source.data["count"]) == [2, 1]
    assert cells.tags == ["t"] and plot.name == "heatmap-t"
