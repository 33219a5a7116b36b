"""Write accounting: lost or unexpected keys fail the database; the report
says what failed, by kind, and when throughput fell."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.figures import compute
from dbtester.config.load import load_test_case_text
from dbtester.control import verify as verify_phase
from dbtester.control.cluster import Cluster
from dbtester.control.job import DatabaseJob
from dbtester.control.measure import Measured, Seeded, Warmed
from dbtester.control.verify import Counted, count, short_of_quorum, verify
from dbtester.databases import get_kind
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

#: the cluster the keys are counted on (count_keys is replaced: no member runs)
CLUSTER = Cluster(endpoints=())


def _job(tmp_path: Path) -> DatabaseJob:
    db = load_test_case_text(CASE).case.databases[0]
    return DatabaseJob(db, "run", ResultsDir(tmp_path / "out"), tmp_path / "scratch", Reporter())


@pytest.mark.parametrize(
    ("found", "lost", "unexpected", "fails"),
    [(95, 0, 0, False), (100, 0, 0, False), (94, 1, 0, True), (101, 0, 1, True)],
)
def test_lost_or_unexpected_keys_fail(
    tmp_path: Path, found: int, lost: int, unexpected: int, fails: bool
) -> None:
    job = _job(tmp_path)
    # 100 attempted: 95 acknowledged, 5 unknown outcome -> 95..100 keys are fine.
    counted = Counted(
        Verification(
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
    )
    if not fails:
        verify(job, counted)
        return
    with pytest.raises(DbtesterError, match="db: verification failed") as caught:
        verify(job, counted)
    assert f"{lost:,} acknowledged keys lost, {unexpected:,} unexpected" in str(caught.value)
    assert "expected 95..100" in str(caught.value)


def _measured(codes: list[str]) -> Measured:
    """A finished load whose requests ended with ``codes``."""
    names = sorted(set(codes), key=lambda c: c != "ok")
    n = len(codes)
    zeros = np.zeros(n, np.int64)
    code = np.array([names.index(c) for c in codes], np.uint8)
    records = Records(zeros, zeros, zeros, code, np.zeros(n, np.uint16), names)
    return Measured(LoadResult(records, 0.0, 1.0, 1.0, "", 1))


def _count(job: DatabaseJob, measured: Measured) -> Counted:
    """The keys counted after ``measured``, with nothing written before it."""
    return count(job, CLUSTER, Seeded(), Warmed(), measured)


@pytest.mark.parametrize(
    ("found", "ok"),
    [(90, True), (95, True), (96, True), (89, False), (97, False)],
)
def test_account_counts_what_the_load_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: int, ok: bool
) -> None:
    """100 writes: 90 acknowledged, 4 refused (never applied), 6 unavailable (may
    or may not have been applied): 90..96 keys are right, anything else fails."""
    job = _job(tmp_path)
    measured = _measured(["ok"] * 90 + ["FAILED_PRECONDITION"] * 4 + ["UNAVAILABLE"] * 6)
    monkeypatch.setattr(type(job.kind), "count_keys", lambda self, settings, prefix: found)
    v = _count(job, measured).verification
    assert v is not None
    assert (v.attempted, v.acknowledged, v.failed, v.unknown) == (100, 90, 4, 6)
    assert (v.expected_min, v.expected_max, v.found) == (90, 96, found)
    assert v.ok is ok
    assert (v.lost, v.unexpected) == (max(0, 90 - found), max(0, found - 96))


def test_the_warm_up_and_the_load_phase_count_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every key-writing request before the measured load is in the
    database as well: the load phase's (all acknowledged) and the
    warm-up's."""
    job = _job(tmp_path)
    loaded = _measured(["ok"] * 20).load
    warmup = _measured(["ok"] * 20 + ["UNAVAILABLE"] * 5).load
    monkeypatch.setattr(type(job.kind), "count_keys", lambda self, settings, prefix: 125)
    counted = count(job, CLUSTER, Seeded(loaded), Warmed(warmup), _measured(["ok"] * 80))
    v = counted.verification
    assert v is not None
    assert (v.attempted, v.acknowledged, v.unknown) == (125, 120, 5)
    assert (v.expected_min, v.expected_max) == (120, 125)


def test_nothing_is_counted_without_a_load(tmp_path: Path) -> None:
    """A search that ran no probe: no load, nothing to count against."""
    assert _count(_job(tmp_path), Measured(None)) == Counted()


def test_account_survives_a_cluster_that_cannot_be_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path)

    def refuse(self: object, settings: object, prefix: bytes) -> int:
        raise ConnectionError("connection refused")

    monkeypatch.setattr(type(job.kind), "count_keys", refuse)
    monkeypatch.setattr(verify_phase, "COUNT_RETRY_S", 0.3)
    monkeypatch.setattr(verify_phase, "COUNT_RETRY_PAUSE_S", 0.1)
    counted = _count(
        job, _measured(["ok"] * 10)
    )  # never raises: the load's own error is the one to report
    assert counted.verification is None
    with pytest.raises(DbtesterError, match="counting keys failed: connection refused"):
        verify(job, counted)


def test_counting_is_retried_while_the_cluster_elects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member died and took the leadership with it: the first counts fail
    ("leader changed"), a later one answers, and that answer is the count."""
    job = _job(tmp_path)
    leader_changed = RuntimeError("etcdserver: leader changed")
    answers: list[int | Exception] = [leader_changed, leader_changed, 10]

    def count_keys(self: object, settings: object, prefix: bytes) -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(type(job.kind), "count_keys", count_keys)
    monkeypatch.setattr(verify_phase, "COUNT_RETRY_PAUSE_S", 0.01)
    counted = _count(job, _measured(["ok"] * 10))
    assert counted.verification is not None and counted.verification.found == 10
    assert not answers
    verify(job, counted)


def test_a_count_refused_for_its_user_is_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong token or password is refused every time: the count fails at
    once instead of retrying for COUNT_RETRY_S."""
    job = _job(tmp_path)
    asked: list[object] = []

    def refused(self: object, settings: object, prefix: bytes) -> int:
        asked.append(settings)
        raise PermissionError("HTTP 403")

    monkeypatch.setattr(type(job.kind), "count_keys", refused)
    monkeypatch.setattr(verify_phase, "COUNT_RETRY_PAUSE_S", 0.01)
    counted = _count(job, _measured(["ok"] * 10))
    assert len(asked) == 1
    assert counted.problem == "counting keys failed: HTTP 403"


def test_keys_that_cannot_be_counted_fail(tmp_path: Path) -> None:
    with pytest.raises(DbtesterError, match="counting keys failed"):
        verify(_job(tmp_path), Counted(problem="counting keys failed: connection refused"))


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


@pytest.mark.parametrize(
    ("running", "members", "quorum", "said"),
    [
        (1, 3, 2, "1 of 3 members running, fewer than the 2 it needs to answer"),
        (0, 1, 1, "0 of 1 member running, fewer than the 1 it needs to answer"),
        (2, 3, 2, ""),  # a majority: maybe electing, worth asking again
        (None, 3, 2, ""),  # the test case's own endpoints: nobody knows
        (1, 3, 1, ""),  # kine: any member answers
    ],
)
def test_a_cluster_short_of_its_quorum_is_not_asked_again(
    running: int | None, members: int, quorum: int, said: str
) -> None:
    assert short_of_quorum(running, members, quorum) == said


def test_a_majority_answers_and_kine_any_member() -> None:
    assert [get_kind("etcd").quorum(n) for n in (1, 3, 5)] == [1, 2, 3]
    assert [get_kind("kine").quorum(n) for n in (1, 3)] == [1, 1]
