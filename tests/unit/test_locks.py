"""A lock load's acquisitions judged and summed up (analyze.locks), and the
type's test-case keys."""

from __future__ import annotations

import pytest

from dbtester.analyze.correctness import describe, judge_locks
from dbtester.analyze.locks import lock_problems, lock_values
from dbtester.results import LockHolds
from dbtester.workloads import workload_of

MS = 1_000_000


def _holds(*rows: tuple[int, int, float, float, float, int]) -> LockHolds:
    """(lock, locker, asked, acquired, released in ms, token) rows."""
    return LockHolds.of(
        (lock, locker, int(a * MS), int(b * MS), int(c * MS), token)
        for lock, locker, a, b, c, token in rows
    )


def test_holders_one_after_another_with_rising_tokens_are_fine() -> None:
    # locker 1 waits from 1 ms for locker 0 (released at 10 ms), gets it at
    # 12 ms; on lock 1 locker 2 asks after locker 3 released: no handover
    holds = _holds(
        (0, 0, 0, 1, 10, 5),
        (0, 1, 1, 12, 20, 7),
        (0, 0, 11, 21, 30, 9),
        (1, 3, 0, 2, 3, 6),
        (1, 2, 5, 6, 8, 8),
    )
    assert lock_problems(holds) == []
    values = lock_values(holds, {"lock_sessions": 4, "failed_releases": 0})
    assert values["LOCKS-ACQUIRED"] == 5
    assert values["LOCK-SESSIONS"] == 4
    # handovers: 10 -> 12 and 20 -> 21 ms (lock 1's second holder was not waiting)
    assert values["HANDOVER-P50-MS"] == pytest.approx(1.5)
    assert values["HANDOVER-MAX-MS"] == pytest.approx(2.0)
    # waits 1, 11, 10, 2, 1 ms: the longest is 11 / 5 = 2.2 times the mean
    assert values["WAIT-FAIRNESS"] == pytest.approx(2.2)
    judged = judge_locks(holds, on_violation="fail")
    assert judged.violation is None and judged.operations == 5 and judged.keys == 2
    assert describe(judged) == "locks held exclusively (5 acquisitions)"


def test_two_holders_at_once_are_named_with_their_times() -> None:
    holds = _holds((0, 4, 0, 1, 10, 5), (0, 7, 2, 9, 15, 6), (1, 1, 0, 1, 2, 3))
    [problem] = lock_problems(holds)
    assert problem.lock == 0
    assert problem.reason == (
        "locker 7 acquired it at +0.008000 s while locker 4 held it (from +0.000000 s"
        " until +0.009000 s)"
    )
    judged = judge_locks(holds, on_violation="report")
    assert judged.violation is not None and judged.violation.key == "lock 0"
    assert describe(judged) == "VIOLATED (1 of 2 locks)"


def test_a_token_that_does_not_rise_is_a_violation() -> None:
    holds = _holds((0, 1, 0, 1, 5, 9), (0, 2, 1, 6, 8, 9))
    [problem] = lock_problems(holds)
    assert "locker 2's fencing token 9" in problem.reason
    assert "is not above locker 1's 9" in problem.reason


def test_the_type_takes_lockers_not_clients_and_whole_second_ttls() -> None:
    w = workload_of(type="lock", requests=100, lockers=7, locks=3, hold_ms=5, ttl="15s")
    assert (w.clients, w.connections) == (7, 7)
    assert w.plan_locks() == {
        "prefix": "/dbtester-locks/",
        "count": 3,
        "hold_s": 0.005,
        "ttl_s": 15,
    }
    assert w.judged_by is not None and w.judged_by.model == "lock"
    assert "clients" not in w.as_raw() and w.as_raw()["lockers"] == 7
    with pytest.raises(ValueError, match="clients is not used by type: lock"):
        workload_of(type="lock", requests=100, clients=5)
    with pytest.raises(ValueError, match="whole seconds"):
        workload_of(type="lock", requests=100, ttl=2.5)
    with pytest.raises(ValueError, match="client_steps cannot be used"):
        workload_of(type="lock", requests=100, lockers=4, client_steps=[2, 4])
