"""bisect's pure parts: the halving over planted findings, the version range,
the step's test case, the folder's record and the options it refuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dbtester.bisect.record import BISECT_FILE, BisectRecord, StepRecord, read, write
from dbtester.bisect.run import BisectOptions, check_options, choose_template, render_table
from dbtester.bisect.search import (
    Changed,
    Found,
    NotReproduced,
    Stuck,
    Try,
    between,
    next_step,
    steps_left,
)
from dbtester.bisect.steps import Question, classify, step_case
from dbtester.config import load_test_case_text
from dbtester.errors import BadInputError, ResultsError, SchemaVersionError

VERSIONS = [f"9.0.{n}" for n in range(12)]


def _walk(versions: list[str], answer: Callable[[str], Changed]) -> tuple[object, list[str]]:
    """Runs the halving to its end, ``answer`` standing in for each step;
    returns the decision and the versions tried, in order."""
    found: dict[str, Changed] = {}
    tried = []
    while isinstance(decision := next_step(versions, found), Try):
        tried.append(decision.version)
        found[decision.version] = answer(decision.version)
    return decision, tried


@pytest.mark.parametrize("first", range(1, 12))
def test_every_planted_first_version_is_found_in_log2_steps(first: int) -> None:
    def answer(version: str) -> Changed:
        return Changed.YES if VERSIONS.index(version) >= first else Changed.NO

    decision, tried = _walk(VERSIONS, answer)
    assert decision == Found(VERSIONS[first], VERSIONS[first - 1], ())
    assert tried[0] == VERSIONS[-1]  # the ends first: the change must reproduce
    # 10 versions between: at most ceil(log2(11)) = 4 steps after the ends'.
    assert len(tried) - 1 <= steps_left(10) == 4
    assert len(set(tried)) == len(tried)


def test_a_version_that_cannot_run_is_skipped_and_named_when_it_hides_the_change() -> None:
    first = 6

    def answer(version: str) -> Changed:
        index = VERSIONS.index(version)
        if index == first - 1:
            return Changed.FAILED
        return Changed.YES if index >= first else Changed.NO

    decision, tried = _walk(VERSIONS, answer)
    # 9.0.5 could not run, so the change came in 9.0.5 or 9.0.6.
    assert decision == Found(VERSIONS[first], VERSIONS[first - 2], (VERSIONS[first - 1],))
    assert VERSIONS[first - 1] in tried


def test_a_change_that_does_not_reproduce_stops_after_the_ends() -> None:
    for bad in (Changed.NO, Changed.UNDECIDED):

        def answer(_version: str, bad: Changed = bad) -> Changed:
            return bad

        decision, tried = _walk(VERSIONS, answer)
        assert decision == NotReproduced(bad)
        assert tried == [VERSIONS[-1]]


def test_an_undecided_step_stops_with_the_range_left() -> None:
    def answer(version: str) -> Changed:
        index = VERSIONS.index(version)
        return Changed.YES if index == 11 else Changed.NO if index < 5 else Changed.UNDECIDED

    decision, tried = _walk(VERSIONS, answer)
    assert isinstance(decision, Stuck)
    assert VERSIONS.index(decision.low) < VERSIONS.index(decision.version)
    assert decision.high == VERSIONS[-1] or VERSIONS.index(decision.high) > 5
    assert tried[-1] == decision.version


def test_replaying_known_findings_resumes_where_the_walk_stopped() -> None:
    def answer(version: str) -> Changed:
        return Changed.YES if VERSIONS.index(version) >= 8 else Changed.NO

    _, tried = _walk(VERSIONS, answer)
    known = {v: answer(v) for v in tried[:2]}
    resumed = next_step(VERSIONS, known)
    assert isinstance(resumed, Try) and resumed.version == tried[2]


def test_the_range_holds_releases_only_oldest_first() -> None:
    listed = ["3.6.0", "3.5.9", "3.5.10", "3.7.0", "3.6.0-rc.1", "3.5.0-alpha.0", "3.5.10"]
    listed += ["0.0.0-20171026175957-610f3c86a089", "3.5.2"]
    assert between(listed, "3.5.2", "3.6.4") == ["3.5.2", "3.5.9", "3.5.10", "3.6.0", "3.6.4"]


def test_a_difference_the_other_way_from_the_bad_end_is_no_change() -> None:
    assert classify("different", -12.0, -26.0) is Changed.YES
    assert classify("different", +12.0, -26.0) is Changed.NO
    assert classify("different", +12.0, None) is Changed.YES  # the ends' own step
    assert classify("equivalent", 1.0, -26.0) is Changed.NO
    assert classify("open", -20.0, -26.0) is Changed.UNDECIDED
    assert classify("failed", None, -26.0) is Changed.FAILED


CASE = """\
title: Bisect me
workload: {type: write, requests: 100, clients: 2, connections: 1}
databases:
  - {id: old, kind: etcd, version: 3.5.17, members: 1, flags: {snapshot_count: 5000}}
  - {id: new, kind: etcd, version: 3.6.8, members: 1}
  - {id: zk, kind: zookeeper, version: 3.8.0, members: 1}
repeat: auto
time_budget: 3m
"""


def test_a_step_runs_the_template_at_two_versions_deciding_on_the_metric() -> None:
    loaded = load_test_case_text(CASE)
    question = Question(loaded, choose_template(loaded, "etcd"), "Latency p99")
    case = step_case(question, "3.5.17", "3.6.0")
    assert [(db.id, db.version) for db in case.databases] == [
        ("etcd-3.5.17", "3.5.17"),
        ("etcd-3.6.0", "3.6.0"),
    ]
    # the template's settings carried to both; the case's budget kept
    assert all(db.flags == loaded.case.databases[0].flags for db in case.databases)
    assert (case.repeat, case.stopping_metrics, case.time_budget) == ("auto", ("Latency p99",), 180)
    # Another version in the test case (or another heading) is the same question.
    moved = load_test_case_text(CASE.replace("3.6.8", "3.6.9").replace("id: old", "id: older"))
    other = Question(moved, choose_template(moved, "etcd"), "Latency p99")
    assert other.digest == question.digest
    changed = load_test_case_text(CASE.replace("requests: 100", "requests: 200"))
    assert Question(changed, choose_template(changed, "etcd"), "Latency p99").digest != (
        question.digest
    )


@pytest.mark.parametrize(
    ("options", "kind", "message"),
    [
        (BisectOptions("3.5.17", "3.6.8", "SPEED"), "etcd", "allowed: AVG-THROUGHPUT"),
        (BisectOptions("3.6.8", "3.5.17", "AVG-THROUGHPUT"), "etcd", "must be older"),
        (BisectOptions("3.5.17", "3.5.17", "AVG-THROUGHPUT"), "etcd", "same version"),
        (BisectOptions("3.6.0-rc.1", "3.6.8", "AVG-THROUGHPUT"), "etcd", "--versions"),
        (BisectOptions("3.5/17", "3.6.8", "AVG-THROUGHPUT"), "etcd", "not a version"),
        (BisectOptions("3.5.17", "3.6.8", "AVG-THROUGHPUT"), None, "etcd, zookeeper"),
        (BisectOptions("3.5.17", "3.6.8", "AVG-THROUGHPUT"), "consul", "no such database"),
    ],
)
def test_bad_options_are_refused_with_what_is_allowed(
    options: BisectOptions, kind: str | None, message: str
) -> None:
    loaded = load_test_case_text(CASE)
    with pytest.raises(BadInputError, match=message.replace("(", r"\(")):
        check_options(loaded, options)
        choose_template(loaded, kind)


def _record(**changes: object) -> BisectRecord:
    return BisectRecord(config_sha256="ab", kind="etcd", metric="AVG-THROUGHPUT").model_copy(
        update=changes
    )


def test_the_record_round_trips_and_refuses_a_newer_schema(tmp_path: Path) -> None:
    step = StepRecord(version="9.0.1", baseline="9.0.0", changed="unchanged", folder="a")
    record = _record(steps=(step,), versions=("9.0.0", "9.0.1", "9.0.2"))
    write(tmp_path, record)
    assert read(tmp_path) == record
    assert read(tmp_path / "none") is None
    data = json.loads((tmp_path / BISECT_FILE).read_text())
    (tmp_path / BISECT_FILE).write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(SchemaVersionError, match="newer"):
        read(tmp_path)
    (tmp_path / BISECT_FILE).write_text("[1, 2]")
    with pytest.raises(ResultsError, match="not a bisect record"):
        read(tmp_path)


def test_the_table_lists_the_versions_tried_oldest_first() -> None:
    steps = (
        StepRecord(
            version="9.0.4",
            baseline="9.0.0",
            changed="changed",
            state="different",
            folder="9.0.0-vs-9.0.4",
            verdict="slower",
            change_pct=-20.0,
            low_pct=-25.0,
            high_pct=-15.0,
            p_value=0.001,
            trials=3,
        ),
        StepRecord(version="9.0.2", baseline="9.0.0", changed="failed", error="no binary"),
    )
    text = render_table(_record(steps=steps), [f"9.0.{n}" for n in range(5)])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["version", "AVG-THROUGHPUT", "against"]
    assert lines[1].startswith("9.0.2") and "could not run" in lines[1]
    assert lines[2].startswith("9.0.4") and "slower -20.0% [-25.0%, -15.0%]" in lines[2]
    assert "0.001" in lines[2] and "9.0.0-vs-9.0.4" in lines[2]


def test_versions_given_by_hand_are_cut_at_the_ends() -> None:
    from dbtester.bisect.run import given_range

    listed = ["1.0", "1.1", "1.2", "1.3", "1.4"]
    assert given_range(listed, "1.0", "1.4") == listed
    assert given_range(listed, "1.0", "1.2") == ["1.0", "1.1", "1.2"]
    assert given_range(["1.1", "1.3"], "1.0", "1.4") == ["1.0", "1.1", "1.3", "1.4"]
    with pytest.raises(BadInputError, match="oldest first"):
        given_range(listed, "1.3", "1.1")
