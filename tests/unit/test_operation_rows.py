"""The per-operation rows of a mixed run (READ-Latency p50 and the like) read
like the table's other rows: latencies in milliseconds with the same
precision as ``Latency p50``, throughput in req/sec, in summary.txt, the
README and report.html; summary.csv keeps raw numbers (no units) for every
row alike."""

from __future__ import annotations

import csv
import html
import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.figures import OPERATION_ROWS, operation_row, unoperated
from dbtester.render import render
from dbtester.report.table import format_value
from dbtester.results import OPERATIONS, Records, ResultsDir
from tests.conftest import ROOT

V1 = ROOT / "tests" / "fixtures" / "results-v1"
LATENCY_ROWS = [row for row in OPERATION_ROWS if row.startswith("Latency p")]
#: a cell of a latency row: "7.351294 ms", as Latency p50's
IN_MS = re.compile(r"^[0-9]+\.[0-9]{6} ms$")


@pytest.mark.parametrize("op", OPERATIONS)
@pytest.mark.parametrize("row", OPERATION_ROWS)
def test_each_operation_row_reads_like_its_row(op: str, row: str) -> None:
    name = operation_row(op, row)
    assert unoperated(name) == (op, row)
    for value in (7.351294, 0.0123, 1234.5):
        assert format_value(name, value) == format_value(row, value)
    if row.startswith("Latency p"):
        assert IN_MS.match(format_value(name, 7.351294)), format_value(name, 7.351294)


def test_other_rows_are_not_taken_for_operation_rows() -> None:
    for row in ("Latency p50", "AVG-THROUGHPUT", "READ-SOMETHING", "CONFLICT-COUNT", "INSERT-"):
        assert unoperated(row) is None
    assert unoperated("READ-MODIFY-WRITE-Latency p99") == ("read-modify-write", "Latency p99")


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """The real v1 run, its requests made reads and updates (every other one)."""
    run = Path(shutil.copytree(V1, tmp_path / "run"))
    store = ResultsDir(run)
    for db_id in ("etcd-v3.5", "etcd-v3.6"):
        layout = store.database(db_id)
        records = Records.load(layout.requests)
        order = np.argsort(records.due_ns, kind="stable")
        op = np.empty(len(records), np.uint8)
        op[order] = np.arange(len(records)) % 2  # 0 read, 1 update
        records.op = op
        records.save(layout.requests)
    return run


def _cells(table: str, row: str) -> list[str]:
    """The cells of ``row`` in a table of right-aligned cells."""
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == row:
            return cells[1:]
    raise AssertionError(f"no {row} row in\n{table}")


def test_a_mixed_run_shows_operation_latencies_in_ms_everywhere(mixed: Path) -> None:
    render(mixed)
    table = (mixed / "summary.txt").read_text()
    readme = (mixed / "README.md").read_text()
    page = (mixed / "report.html").read_text()
    for op in ("read", "update"):
        for row in LATENCY_ROWS:
            name = operation_row(op, row)
            cells = _cells(table, name)
            assert len(cells) == 2 and all(IN_MS.match(c) for c in cells), (name, cells)
            assert all(IN_MS.match(c) for c in _cells(table, row))  # as the totals' row
            for cell in cells:
                assert cell in readme
                assert f"<td>{html.escape(cell)}</td>" in page
        throughput = _cells(table, operation_row(op, "THROUGHPUT"))
        assert all(c.endswith(" req/sec") for c in throughput), throughput
    # CSV: raw numbers, no units, for the operation rows as for the others
    rows = {r[0]: r[1:] for r in csv.reader(io.StringIO((mixed / "summary.csv").read_text()))}
    for name in (operation_row("read", "Latency p50"), "Latency p50"):
        assert all(float(v) > 0 and not v.endswith("ms") for v in rows[name]), rows[name]
    # the same number as the JSON figures hold, to the table's precision
    assert float(_cells(table, "READ-Latency p99")[0].split()[0]) == pytest.approx(
        float(rows["READ-Latency p99"][0]), abs=1e-6
    )
