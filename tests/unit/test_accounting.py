"""Write accounting: lost or unexpected keys fail the database; the report
says what failed, by kind, and when throughput fell."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.figures import compute
from dbtester.config.load import load_test_case_text
from dbtester.control import database_run
from dbtester.control.database_run import DatabaseRun
from dbtester.errors import DbtesterError
from dbtester.load.runner import LoadResult
from dbtester.results import Records, ResultsDir, Verification
from dbtester.util.progress import Reporter
from tests.support.data import START, analysis_data, verified

CASE = """
title: t
workload: {type: write, requests: 100}
databases: [{id: db, kind: etcd, version: 3.5.17}]
"""


def _run(tmp_path: Path) -> DatabaseRun:
    db = load_test_case_text(CASE).case.databases[0]
    return DatabaseRun(
        db, "run", ResultsDir(tmp_path / "out"), tmp_path / "scratch", None, Reporter()
    )


@pytest.mark.parametrize(
    ("found", "lost", "unexpected", "fails"),
    [(95, 0, 0, False), (100, 0, 0, False), (94, 1, 0, True), (101, 0, 1, True)],
)
def test_lost_or_unexpected_keys_fail(
    tmp_path: Path, found: int, lost: int, unexpected: int, fails: bool
) -> None:
    run = _run(tmp_path)
    # 100 attempted: 95 acknowledged, 5 unknown outcome -> 95..100 keys are fine.
    run.verification = Verification(
        attempted=100,
        acknowledged=95,
        failed=0,
        unknown=5,
        expected_min=95,
        expected_max=100,
        found=found,
        lost=lost,
        unexpected=unexpected,
    )
    if not fails:
        run._verify()
        return
    with pytest.raises(DbtesterError, match="verification failed") as caught:
        run._verify()
    assert f"{lost:,} acknowledged keys lost, {unexpected:,} unexpected" in str(caught.value)
    assert "expected 95..100" in str(caught.value)


def _loaded(run: DatabaseRun, codes: list[str]) -> None:
    """Give the run a finished load whose requests ended with ``codes``."""
    names = sorted(set(codes), key=lambda c: c != "ok")
    n = len(codes)
    zeros = np.zeros(n, np.int64)
    code = np.array([names.index(c) for c in codes], np.uint8)
    records = Records(zeros, zeros, zeros, code, np.zeros(n, np.uint16), names)
    run.load = LoadResult(records, 0.0, 1.0, 1.0, "", 1)


@pytest.mark.parametrize(
    ("found", "ok"),
    [(90, True), (95, True), (96, True), (89, False), (97, False)],
)
def test_account_counts_what_the_load_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: int, ok: bool
) -> None:
    """100 writes: 90 acknowledged, 4 refused (never applied), 6 unavailable (may
    or may not have been applied): 90..96 keys are right, anything else fails."""
    run = _run(tmp_path)
    _loaded(run, ["ok"] * 90 + ["FAILED_PRECONDITION"] * 4 + ["UNAVAILABLE"] * 6)
    monkeypatch.setattr(type(run.kind), "count_keys", lambda self, settings: found)
    run._account()
    v = run.verification
    assert v is not None
    assert (v.attempted, v.acknowledged, v.failed, v.unknown) == (100, 90, 4, 6)
    assert (v.expected_min, v.expected_max, v.found) == (90, 96, found)
    assert v.ok is ok
    assert (v.lost, v.unexpected) == (max(0, 90 - found), max(0, found - 96))


def test_account_survives_a_cluster_that_cannot_be_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(tmp_path)
    _loaded(run, ["ok"] * 10)

    def refuse(self: object, settings: object) -> int:
        raise ConnectionError("connection refused")

    monkeypatch.setattr(type(run.kind), "count_keys", refuse)
    monkeypatch.setattr(database_run, "COUNT_RETRY_S", 0.3)
    monkeypatch.setattr(database_run, "COUNT_RETRY_PAUSE_S", 0.1)
    run._account()  # never raises: the load's own error is the one to report
    assert run.verification is None
    with pytest.raises(DbtesterError, match="counting keys failed: connection refused"):
        run._verify()


def test_counting_is_retried_while_the_cluster_elects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member died and took the leadership with it: the first counts fail
    ("leader changed"), a later one answers, and that answer is the count."""
    run = _run(tmp_path)
    _loaded(run, ["ok"] * 10)
    leader_changed = RuntimeError("etcdserver: leader changed")
    answers: list[int | Exception] = [leader_changed, leader_changed, 10]

    def count(self: object, settings: object) -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(type(run.kind), "count_keys", count)
    monkeypatch.setattr(database_run, "COUNT_RETRY_PAUSE_S", 0.01)
    run._account()
    assert run.verification is not None and run.verification.found == 10
    assert not answers
    run._verify()


def test_keys_that_cannot_be_counted_fail(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run._count_problem = "counting keys failed: connection refused"
    with pytest.raises(DbtesterError, match="counting keys failed"):
        run._verify()


def test_failed_verification_shows_in_the_table() -> None:
    data = analysis_data()
    data = replace(data, record=data.record.model_copy(update={"verification": verified(90, 95)}))
    assert compute(data).values["KEYS-VERIFIED"] == "90 / 95 FAILED"


def test_the_report_says_when_throughput_fell() -> None:
    """10 s of load; the database dies at 6 s: every later request fails."""
    n = 10_000
    due = (START * 1e9 + np.linspace(0, 10e9, n, endpoint=False)).astype(np.int64)
    latency = np.full(n, 1_000_000, np.int64)
    code = np.where(due >= START * 1e9 + 6e9, 1, 0).astype(np.uint8)
    code[-100:] = 2
    data = replace(
        analysis_data(),
        records=Records(
            due, latency, latency, code, np.zeros(n, np.uint16), ["ok", "UNAVAILABLE", "timeout"]
        ),
    )
    notes = compute(data).notes
    (note,) = [n for n in notes if "requests failed" in n]
    assert "4,000 requests failed (UNAVAILABLE 3,900, timeout 100)" in note
    assert "the first 6.0 s into the load" in note
    assert "from 1,000 req/s in the second before to 0 req/s" in note
