"""check: {model: informer}: a Kubernetes load's informers held to a fresh
list at the end, from what the engine found; and what fails the run."""

from __future__ import annotations

import pytest

from dbtester.analyze.correctness import describe, judge_informers
from dbtester.results import InformerRecord

HELD = InformerRecord(synced_s=0.1, relists=0, resumes=0, events=500, converged=True)
LEFT_OVER = InformerRecord(
    synced_s=0.1,
    relists=1,
    resumes=0,
    events=499,
    converged=True,
    problems=("/registry/pods/ns-1/pod-7 (revision 40) is still there, gone from the list at 90",),
    problem_count=3,
)
BEHIND = InformerRecord(synced_s=0.1, relists=0, resumes=2, events=12, converged=False)


def test_informers_that_converged_hold() -> None:
    record = judge_informers([HELD, HELD], on_violation="fail")
    assert record.model == "informer" and record.held
    assert (record.clients, record.operations, record.violated_keys) == (2, 1000, 0)
    assert describe(record) == "informers held (1,000 events)"


def test_the_first_informer_found_wrong_is_named_with_its_first_problem() -> None:
    record = judge_informers([HELD, LEFT_OVER, BEHIND], on_violation="report")
    assert not record.held and record.violated_keys == 2 and record.on_violation == "report"
    assert record.violation is not None and record.violation.key == "informer 1"
    assert record.violation.reason == (
        "/registry/pods/ns-1/pod-7 (revision 40) is still there, gone from the list at 90"
        " (and 2 more)"
    )
    assert describe(record) == "VIOLATED (2 of 3 informers)"


@pytest.mark.parametrize("first", [[BEHIND], [HELD, BEHIND]])
def test_an_informer_that_never_caught_up_is_a_violation(first: list[InformerRecord]) -> None:
    violation = judge_informers(first, on_violation="fail").violation
    assert violation is not None and violation.key == f"informer {len(first) - 1}"
    assert "did not reach the objects' last revision" in violation.reason
