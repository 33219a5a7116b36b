"""An open-loop load's send lag: SCHEDULE-LAG rows from the requests a free
client took at their due time, the open loop's queue apart, in ms with three
decimals, and the records' ``queued`` column kept on disk."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.data import DatabaseData
from dbtester.analyze.figures import SCHEDULE_ROWS, compute, table_rows
from dbtester.report.table import format_value
from dbtester.results import Records
from dbtester.results.requests import UNKNOWN_QUEUED
from tests.support.data import analysis_data


def _open_loop(lag_ns: int, queued_every: int = 0, rate: float = 1000.0) -> DatabaseData:
    """The synthetic load, at ``rate``, each request sent ``lag_ns`` after its
    due time (every ``queued_every``-th one waited for a client instead)."""
    data = analysis_data(n=10_000)
    records = data.records
    assert records is not None
    service = records.latency_ns - lag_ns
    queued = np.zeros(len(records), np.uint8)
    if queued_every:
        queued[::queued_every] = 1
    records = replace(records, service_ns=service, queued=queued)
    database = {**data.record.database, "workload": {"type": "write", "rate": rate}}
    record = data.record.model_copy(update={"database": database})
    return replace(data, records=records, record=record)


def test_the_rows_hold_the_lag_of_requests_sent_on_time() -> None:
    figures = compute(_open_loop(lag_ns=40_000, queued_every=10))
    assert figures.values["SCHEDULE-LAG p50"] == pytest.approx(0.040)  # exact: every lag 40 µs
    assert figures.values["SCHEDULE-LAG p99"] == pytest.approx(0.040)
    rows = table_rows([figures])
    assert rows[rows.index("Latency p99.99") + 1 :][:2] == list(SCHEDULE_ROWS)
    assert format_value("SCHEDULE-LAG p50", 0.04) == "0.040 ms"
    queue = [n for n in figures.notes if "waited for one" in n]
    assert queue and "1,000 requests (10.0%)" in queue[0], figures.notes


def test_a_lag_that_is_a_visible_part_of_the_latency_is_noted() -> None:
    small = compute(_open_loop(lag_ns=40_000))  # 40 µs of ~25 ms latency
    assert not [n for n in small.notes if "after their due time" in n], small.notes
    large = compute(_open_loop(lag_ns=5_000_000))  # 5 ms of ~25 ms: about 20%
    noted = [n for n in large.notes if "after their due time" in n]
    assert noted and "5.000 ms" in noted[0], large.notes


def test_closed_loop_has_no_rows_and_old_records_say_no_data() -> None:
    closed = compute(_open_loop(lag_ns=40_000, rate=0.0))
    assert not set(SCHEDULE_ROWS) & set(closed.values)
    old = _open_loop(lag_ns=40_000)
    assert old.records is not None
    unknown = np.full(len(old.records), UNKNOWN_QUEUED, np.uint8)
    figures = compute(replace(old, records=replace(old.records, queued=unknown)))
    assert [figures.values[row] for row in SCHEDULE_ROWS] == [None, None]


def test_the_queued_column_is_saved_and_read_back(tmp_path: Path) -> None:
    data = _open_loop(lag_ns=1_000, queued_every=3)
    assert data.records is not None
    path = tmp_path / "client-latency.npz"
    data.records.save(path)
    loaded = Records.load(path)
    assert np.array_equal(loaded.waited, data.records.waited)
    assert np.array_equal(loaded.subset(loaded.waited == 1).waited, np.ones(3334, np.uint8))


def test_the_operation_names_are_the_engines() -> None:
    """One spelling: the records' op codes name what the engine says they do."""
    engine = pytest.importorskip("dbtester._engine")
    from dbtester.results import OPERATIONS

    if not hasattr(engine, "OPERATIONS"):
        pytest.skip("an engine built before it exported OPERATIONS")
    assert tuple(engine.OPERATIONS) == OPERATIONS
