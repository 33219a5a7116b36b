"""The note on an open-loop run that was offered more than it served, and
how it and the client-bound note name one cause between them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dbtester.analyze.data import DatabaseData
from dbtester.analyze.figures import client_bound, compute, served_rate, unserved
from dbtester.results import FaultSummary, Records
from tests.support.data import START, analysis_data, with_cpu


def _open_loop(data: DatabaseData, rate: float, capacity: float | None = None) -> DatabaseData:
    """``data``'s requests due evenly at ``rate``/s; answered at once, or, with
    ``capacity``, one after another at that rate (a queue that grows)."""
    n = len(data.records) if data.records is not None else 0
    due = (START + np.arange(n) / rate) * 1e9
    if capacity is None:
        done = due + 2e6  # 2 ms each
    else:
        done = np.maximum(due + 2e6, (START + np.arange(1, n + 1) / capacity) * 1e9)
    latency = (done - due).astype(np.int64)
    code = np.zeros(n, np.uint8)
    records = Records(due.astype(np.int64), latency, latency, code, np.zeros(n, np.uint16), ["ok"])
    workload = {"type": "write", "rate": rate}
    record = data.record.model_copy(
        update={"database": {**data.record.database, "workload": workload}}
    )
    return replace(data, records=records, record=record)


def test_a_database_that_keeps_up_gets_no_note() -> None:
    data = _open_loop(analysis_data(n=20_000), rate=2_000)
    rate, served, where = served_rate(data) or (0, 0, "?")
    assert rate == 2_000 and served == pytest.approx(2_000, rel=0.01) and where == ""
    assert unserved(data) is None
    assert not any("offered" in n for n in compute(data).notes)


def test_a_database_that_falls_behind_is_named() -> None:
    data = _open_loop(analysis_data(n=20_000), rate=2_000, capacity=1_200)
    note = unserved(data)
    assert note is not None
    assert "offered 2,000 requests/s (open loop) but 1,200/s were answered (60%)" in note
    assert "the database could not keep up" in note
    assert any(note in n for n in compute(data).notes)


def test_closed_loop_and_old_runs_are_not_judged() -> None:
    data = analysis_data(n=20_000)  # no workload recorded: a run from before it was
    assert served_rate(data) is None and unserved(data) is None
    closed = _open_loop(data, rate=2_000, capacity=1_200)
    closed = replace(
        closed,
        record=closed.record.model_copy(
            update={"database": {**closed.record.database, "workload": {"rate": 0.0}}}
        ),
    )
    assert unserved(closed) is None


def test_only_the_time_before_the_first_fault_counts() -> None:
    # keeps up for the first 4 s, then a fault: whatever followed is the fault's
    data = _open_loop(analysis_data(n=20_000), rate=2_000)
    fault = FaultSummary(
        number=1,
        action="kill",
        target="leader",
        member=0,
        start_s=4.0,
        unavailable_s=3.0,
        unavailable_from_s=4.0,
        recovered=True,
    )
    rate, served, where = served_rate(data, [fault]) or (0, 0, "")
    assert (rate, where) == (2_000, " before the first fault")
    assert served == pytest.approx(2_000, rel=0.01)
    assert unserved(data, [fault]) is None
    early = fault.model_copy(update={"start_s": 0.5})  # too short a stretch to tell
    assert served_rate(data, [early]) is None


def test_the_two_notes_never_contradict() -> None:
    busy = with_cpu(190.0, 5.0, shared=True)  # client-bound by CPU, closed loop
    assert client_bound(busy) is not None
    kept_up = _open_loop(busy, rate=2_000)
    # an open loop that kept up: its rate set the throughput, not the client
    assert client_bound(kept_up) is None and unserved(kept_up) is None
    behind = _open_loop(busy, rate=2_000, capacity=1_200)
    note = unserved(behind)
    assert client_bound(behind) is not None and note is not None
    assert "the client could not keep up" in note and "database could not" not in note
