"""Write accounting: lost or unexpected keys fail the database; the report
says what failed, by kind, and when throughput fell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.figures import compute
from dbtester.config.load import load_test_case_text
from dbtester.control.session import DatabaseRun, Verification
from dbtester.errors import DbtesterError
from dbtester.load.records import Records
from tests.unit.test_analysis import START, _data

CASE = """
title: t
workload: {type: write, requests: 100}
databases: [{id: db, kind: etcd, version: 3.5.17}]
"""


def _run(tmp_path: Path) -> DatabaseRun:
    db = load_test_case_text(CASE).case.databases[0]
    return DatabaseRun(db, "run", tmp_path / "out", tmp_path / "scratch")


@pytest.mark.parametrize(
    ("found", "lost", "unexpected", "fails"),
    [(95, 0, 0, False), (100, 0, 0, False), (94, 1, 0, True), (101, 0, 1, True)],
)
def test_lost_or_unexpected_keys_fail(
    tmp_path: Path, found: int, lost: int, unexpected: int, fails: bool
) -> None:
    run = _run(tmp_path)
    # 100 attempted: 95 acknowledged, 5 unknown outcome -> 95..100 keys are fine.
    run.verification = Verification(100, 95, 0, 5, 95, 100, found, lost, unexpected)
    if not fails:
        run._verify()
        return
    with pytest.raises(DbtesterError, match="verification failed") as caught:
        run._verify()
    assert f"{lost:,} acknowledged keys lost, {unexpected:,} unexpected" in str(caught.value)
    assert "expected 95..100" in str(caught.value)


def test_keys_that_cannot_be_counted_fail(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run._count_problem = "counting keys failed: connection refused"
    with pytest.raises(DbtesterError, match="counting keys failed"):
        run._verify()


def test_failed_verification_shows_in_the_table() -> None:
    data = _data()
    data.record["verification"] = {"found": 90, "expected_min": 95, "lost": 5, "unexpected": 0}
    assert compute(data).values["KEYS-VERIFIED"] == "90 / 95 FAILED"


def test_the_report_says_when_throughput_fell() -> None:
    """10 s of load; the database dies at 6 s: every later request fails."""
    n = 10_000
    due = (START * 1e9 + np.linspace(0, 10e9, n, endpoint=False)).astype(np.int64)
    latency = np.full(n, 1_000_000, np.int64)
    code = np.where(due >= START * 1e9 + 6e9, 1, 0).astype(np.uint8)
    code[-100:] = 2
    data = _data()
    data.records = Records(
        due, latency, latency, code, np.zeros(n, np.uint16), ["ok", "UNAVAILABLE", "timeout"]
    )
    notes = compute(data).notes
    (note,) = [n for n in notes if "requests failed" in n]
    assert "4,000 requests failed (UNAVAILABLE 3,900, timeout 100)" in note
    assert "the first 6.0 s into the load" in note
    assert "from 1,000 req/s in the second before to 0 req/s" in note
