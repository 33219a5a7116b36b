"""The mixed workload's records and table: the op column, per-operation rows,
conflicts (an outcome, not an error), and records saved before operations
were recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.data import DatabaseData
from dbtester.analyze.figures import CONFLICT_ROW, Figures, compute, table_rows
from dbtester.results import OPERATIONS, DatabaseRecord, LoadWindow, Records
from dbtester.results.requests import UNKNOWN_OP

START = 1_800_000_000.0
READ, UPDATE, RMW = OPERATIONS.index("read"), OPERATIONS.index("update"), 3


def _records(ops: list[int], codes: list[int], latency_ms: list[float]) -> Records:
    n = len(ops)
    due = (START * 1e9 + np.arange(n) * 1e8).astype(np.int64)  # 10 a second, 10 s for 100
    latency = (np.array(latency_ms) * 1e6).astype(np.int64)
    return Records(
        due,
        latency,
        latency,
        np.array(codes, np.uint8),
        np.zeros(n, np.uint16),
        ["ok", "conflict", "UNAVAILABLE"],
        np.array(ops, np.uint8),
    )


def _figures(records: Records) -> Figures:
    record = DatabaseRecord(
        run_id="run",
        database={"id": "db", "kind": "etcd", "version": "3.5.17"},
        started_unix=START,
        load=LoadWindow(started_unix=START, ended_unix=START + 10, workers=1, cpu_seconds=1.0),
        embedded=True,
    )
    return compute(DatabaseData("db", "db", record, records, None, []))


def test_each_operation_gets_its_rows() -> None:
    # 50 reads at 2 ms, 30 updates at 10 ms, 20 read-modify-writes at 20 ms of
    # which 5 lost their race and 1 failed.
    ops = [READ] * 50 + [UPDATE] * 30 + [RMW] * 20
    codes = [0] * 80 + [1] * 5 + [2] + [0] * 14
    latency = [2.0] * 50 + [10.0] * 30 + [20.0] * 20
    figures = _figures(_records(ops, codes, latency))
    v = figures.values
    span = 9.9 + 0.02  # first due to the last reply
    assert v["READ-THROUGHPUT"] == pytest.approx(50 / span)
    assert v["UPDATE-THROUGHPUT"] == pytest.approx(30 / span)
    assert v["READ-MODIFY-WRITE-THROUGHPUT"] == pytest.approx(14 / span)
    assert v["READ-Latency p99"] == pytest.approx(2.0)
    assert v["UPDATE-Latency p50"] == pytest.approx(10.0)
    assert v["READ-MODIFY-WRITE-Latency p99.9"] == pytest.approx(20.0)
    assert v["UPDATE-Latency max"] == pytest.approx(10.0)
    assert "INSERT-THROUGHPUT" not in v
    # each operation's latency over time, for its own chart
    reads = figures.series["AVG-LATENCY-MS-READ"]
    assert reads.y.tolist() == pytest.approx([2.0] * len(reads.y))
    # updates are due from 5.0 s to 7.9 s: three seconds of them
    updates = figures.series["AVG-LATENCY-MS-UPDATE"]
    assert updates.x.tolist() == [5.0, 6.0, 7.0]
    assert updates.y.tolist() == pytest.approx([10.0, 10.0, 10.0])
    assert "AVG-LATENCY-MS-INSERT" not in figures.series
    # A conflict is counted apart and is not an error; the failure is.
    assert v[CONFLICT_ROW] == 5
    assert v["CLIENT-ERROR-COUNT"] == 1
    rows = table_rows([figures])
    assert rows[-16:] == [
        *(
            f"{op}-{row}"
            for op in ("READ", "UPDATE", "READ-MODIFY-WRITE")
            for row in ("THROUGHPUT", "Latency p50", "Latency p99", "Latency p99.9", "Latency max")
        ),
        CONFLICT_ROW,
    ]


def test_one_operation_gets_no_rows_of_its_own() -> None:
    figures = _figures(_records([UPDATE] * 10, [0] * 10, [1.0] * 10))
    assert not any(r.startswith(("UPDATE-", "READ-")) for r in figures.values)
    assert not {f"AVG-LATENCY-MS-{op.upper()}" for op in OPERATIONS} & set(figures.series)
    assert CONFLICT_ROW not in table_rows([figures])


def test_the_op_column_is_saved_and_older_records_have_none(tmp_path: Path) -> None:
    records = _records([READ, RMW, UPDATE], [0, 1, 0], [1.0, 2.0, 3.0])
    records.save(tmp_path / "r.npz")
    again = Records.load(tmp_path / "r.npz")
    assert again.ops.tolist() == [READ, RMW, UPDATE]
    assert again.operations() == ["read", "update", "read-modify-write"]
    assert again.errors() == 0  # a conflict is not an error
    # Saved before schema 6: no op array; read as not recorded.
    arrays = dict(np.load(tmp_path / "r.npz"))
    del arrays["op"]
    np.savez(tmp_path / "old.npz", **arrays)
    old = Records.load(tmp_path / "old.npz")
    assert (old.ops == UNKNOWN_OP).all() and old.operations() == []


def test_compare_and_history_know_every_operation_row() -> None:
    from dbtester.analyze.figures import OPERATION_ROWS, operation_row
    from dbtester.analyze.stats import METRICS

    for op in OPERATIONS:
        for row in OPERATION_ROWS:
            metric = METRICS[operation_row(op, row)]
            assert metric.better == ("higher" if row == "THROUGHPUT" else "lower")
    assert METRICS[CONFLICT_ROW].better == "lower"
