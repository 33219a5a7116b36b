"""A lock load's acquisitions judged and summed up (analyze.locks), and the
type's test-case keys."""

from __future__ import annotations

import numpy as np
import pytest

from dbtester.analyze.correctness import describe, judge_locks
from dbtester.analyze.faults import fault_values, lock_fault_figures
from dbtester.analyze.locks import lock_problems, lock_values
from dbtester.config.faults import Fault
from dbtester.results import FaultSummary, LockHolds
from dbtester.workloads import workload_of

MS = 1_000_000


def _holds(*rows: tuple[int, int, float, float, float, int], crashed: int = -1) -> LockHolds:
    """(lock, locker, asked, acquired, released in ms, token) rows; row
    ``crashed`` is a holder that crashed (released: when)."""
    return LockHolds.of(
        (lock, locker, int(a * MS), int(b * MS), int(c * MS), token, int(i == crashed))
        for i, (lock, locker, a, b, c, token) in enumerate(rows)
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
    values = lock_values(holds, {"lock_sessions": 4, "failed_releases": 0}, 10.0)
    assert values["LOCKS-ACQUIRED"] == 5
    assert values["LOCK-SESSIONS"] == 4
    assert values["SESSION-TTL-SECONDS"] == 10.0
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


def test_a_locker_taking_its_own_unreleased_key_again_keeps_its_token() -> None:
    # locker 1's release at 5 ms never reached the database: at 6 ms it takes
    # its own key again (token 9); another locker with token 9 would be wrong
    assert lock_problems(_holds((0, 1, 0, 1, 5, 9), (0, 1, 5, 6, 8, 9), (0, 2, 6, 9, 10, 11))) == []
    [problem] = lock_problems(_holds((0, 1, 0, 1, 5, 9), (0, 2, 5, 6, 8, 9)))
    assert "locker 2's fencing token 9" in problem.reason


def test_the_type_takes_lockers_not_clients_and_whole_second_ttls() -> None:
    w = workload_of(type="lock", requests=100, lockers=7, locks=3, hold_ms=5, ttl="15s")
    assert (w.clients, w.connections) == (7, 7)
    assert w.plan_locks() == {
        "prefix": "/dbtester-locks/",
        "count": 3,
        "hold_s": 0.005,
        "ttl_s": 15,
    }
    assert w.fault_problem("expire_session", 2) is None
    assert w.fault_problem("expire_session", 3) == ("has 3 lock(s), 0..2: there is no lock 3")
    assert w.judged_by is not None and w.judged_by.model == "lock"
    assert "clients" not in w.as_raw() and w.as_raw()["lockers"] == 7
    with pytest.raises(ValueError, match="clients is not used by type: lock"):
        workload_of(type="lock", requests=100, clients=5)
    with pytest.raises(ValueError, match="whole seconds"):
        workload_of(type="lock", requests=100, ttl=2.5)
    with pytest.raises(ValueError, match="client_steps cannot be used"):
        workload_of(type="lock", requests=100, lockers=4, client_steps=[2, 4])


def test_a_crashed_holders_expiry_is_no_handover_and_no_violation() -> None:
    # locker 0 crashes at 10 ms holding lock 0; locker 1, waiting since 1 ms,
    # gets it when the session expired, at 3,010 ms
    holds = _holds(
        (0, 0, 0, 1, 10, 5), (0, 1, 1, 3010, 3020, 7), (0, 2, 3011, 3021, 3030, 8), crashed=0
    )
    assert lock_problems(holds) == []
    values = lock_values(holds, {"lock_sessions": 4}, 3.0)
    # only 3,020 -> 3,021 ms is a handover: the 3 s wait was the expiry's
    assert values["HANDOVER-MAX-MS"] == pytest.approx(1.0)


def _window(start_s: float, lock: int | None) -> FaultSummary:
    return FaultSummary(
        number=1,
        action="expire_session" if lock is not None else "kill",
        target="" if lock is not None else "leader",
        member=None,
        start_s=start_s,
        unavailable_s=0.0,
        unavailable_from_s=0.0,
        recovered=True,
        lock=lock,
    )


def test_lock_recovery_waits_for_every_lock_held_when_the_fault_struck() -> None:
    holds = _holds(
        (0, 0, 0, 1, 10, 5),
        (0, 1, 1, 3010, 3020, 7),  # lock 0 crashed at 10 ms: a new holder at 3.010 s
        (1, 2, 0, 2, 500, 6),
        (1, 3, 3, 501, 600, 8),  # lock 1 handed over at 0.501 s
        (2, 4, 700, 701, 800, 9),  # lock 2 was not held at 5 ms
        crashed=0,
    )
    expired, killed, late = lock_fault_figures(
        [_window(0.010, 0), _window(0.005, None), _window(3.5, None)], holds, load_start=0.0
    )
    assert (expired.locks_held, expired.lock_recovery_s) == (1, 3.0)
    # locks 0 and 1 were held at 5 ms: the later one back decides
    assert (killed.locks_held, killed.lock_recovery_s) == (2, 3.005)
    assert (late.locks_held, late.lock_recovery_s) == (0, None)
    rows = fault_values(expired)
    assert rows["FAULT-1-LOCK-RECOVERY-SECONDS"] == 3.0
    # a holder doomed before it took lock 3 crashes as it takes it, a moment
    # after the window's start (rounded to the ms): its own take is no recovery
    doomed = _holds((3, 5, 0, 20.0004, 20.0004, 4), (3, 6, 1, 1020, 1030, 5), crashed=0)
    [took] = lock_fault_figures([_window(0.020, 3)], doomed, load_start=0.0)
    assert took.lock_recovery_s == 1.0
    [never] = lock_fault_figures([_window(3.015, None)], holds, load_start=0.0)
    assert never.lock_recovery_s is None
    assert fault_values(never)["FAULT-1-LOCK-RECOVERY-SECONDS"] == "not within the load"


def test_expire_session_names_a_lock_and_no_member() -> None:
    fault = Fault.model_validate({"at": 2.0, "action": "expire_session", "lock": 1})
    assert fault.describe() == "expire_session of lock 1's holder at 2 s"
    with pytest.raises(ValueError, match="takes no member"):
        Fault.model_validate({"at": 2.0, "action": "expire_session", "lock": 1, "member": 0})
    with pytest.raises(ValueError, match="needs lock"):
        Fault.model_validate({"at": 2.0, "action": "expire_session"})
    with pytest.raises(ValueError, match="lock is for expire_session"):
        Fault.model_validate({"at": 2.0, "action": "kill", "member": 0, "lock": 1})
    assert workload_of(type="write", requests=10).fault_problem("expire_session", 0) == (
        "has no sessions for expire_session to expire (type: lock has)"
    )


def test_consuls_lock_delay_is_noted_for_loads_with_sessions() -> None:
    from dbtester.databases import get_kind
    from dbtester.databases.consul import ConsulClient

    consul, etcd = get_kind("consul"), get_kind("etcd")
    note = consul.session_note(ConsulClient())
    assert note is not None and "stays refused for the lock-delay, 15 s" in note
    assert consul.session_note(ConsulClient(lock_delay_s=0)) is None
    assert etcd.session_note(etcd.client_model()) is None


def test_the_lock_charts_show_handovers_each_second_and_acquisitions_by_locker() -> None:
    from dbtester.analyze.locks import acquisitions_by_locker, handover_per_second

    # handovers of 2 ms (at 12 ms) and 1 ms (at 21 ms) in second 0, 4 ms in second 1
    holds = _holds(
        (0, 0, 0, 1, 10, 5),
        (0, 1, 1, 12, 20, 7),
        (0, 0, 11, 21, 1002, 9),
        (0, 2, 500, 1006, 1010, 11),
    )
    seconds, medians = handover_per_second(holds, load_start=0.0)
    assert seconds.tolist() == [0.0, 1.0]
    assert medians.tolist() == pytest.approx([1.5, 4.0])
    lockers, counts = acquisitions_by_locker(holds)
    assert lockers.tolist() == [0.0, 1.0, 2.0] and counts.tolist() == [2.0, 1.0, 1.0]


def test_consuls_shortest_session_ttl_is_its_servers_setting() -> None:
    from dbtester.databases import get_kind
    from dbtester.databases.consul import ConsulFlags

    consul = get_kind("consul")
    assert consul.session_ttl_bounds(ConsulFlags()) == (10, 86_400)
    assert consul.session_ttl_bounds(ConsulFlags(session_ttl_min_s=2)) == (2, 86_400)


def test_holds_saved_before_crashes_were_recorded_load_with_none_crashed(tmp_path) -> None:
    holds = _holds((0, 1, 0, 1, 5, 9), (0, 2, 1, 6, 8, 10))
    columns = {name: getattr(holds, name) for name in ("lock", "locker", "asked_ns")}
    columns |= {n: getattr(holds, n) for n in ("acquired_ns", "released_ns", "token")}
    np.savez(tmp_path / "v20.npz", **columns)  # schema 20: no crashed column
    loaded = LockHolds.load(tmp_path / "v20.npz")
    assert loaded.crashed.tolist() == [False, False]
    assert loaded.token.tolist() == [9, 10]
    holds.save(tmp_path / "v21.npz")
    assert LockHolds.load(tmp_path / "v21.npz").crashed.tolist() == [False, False]
