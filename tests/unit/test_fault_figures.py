"""Per-fault figures (dbtester.analyze.faults) from made-up request records
whose gaps, rates and errors are known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from dbtester.analyze.faults import fault_figures, windows
from dbtester.results import FaultRecord, Records

START = 1_700_000_000.0  # the load's start, unix seconds


def _records(
    done_s: np.ndarray, ok: np.ndarray, latency_ms: float = 2.0, kinds: tuple[str, ...] = ()
) -> Records:
    """Requests completing at ``done_s`` (load clock), ``ok`` or failed with
    ``kinds`` in turn (UNAVAILABLE by default), each ``latency_ms`` long."""
    n = len(done_s)
    latency = np.full(n, int(latency_ms * 1e6), np.int64)
    due = ((START + done_s) * 1e9).astype(np.int64) - latency
    names = ["ok", *(kinds or ("UNAVAILABLE",))]
    code = np.zeros(n, np.uint8)
    failed = np.flatnonzero(~ok)
    code[failed] = 1 + np.arange(len(failed)) % (len(names) - 1)
    return Records(due, latency, latency, code, np.zeros(n, np.uint16), names)


def _fault(
    at: float, action: str, target: str = "", member: int = 1, **more: object
) -> FaultRecord:
    return FaultRecord.model_validate(
        {"at_s": at, "action": action, "target": target, "member": member, "unix": START + at}
        | more
    )


def _steady(begin: float, end: float, rate: float) -> np.ndarray:
    return np.arange(begin, end, 1.0 / rate)


def test_a_gap_and_the_recovery_are_measured_from_completions() -> None:
    # 1,000/s for 10 s, nothing but failures from 10.0 to 11.5, then 1,000/s again
    ok_s = np.concatenate([_steady(0, 10, 1000), _steady(11.5, 30, 1000)])
    failed_s = _steady(10.0, 11.5, 200)
    done = np.concatenate([ok_s, failed_s])
    ok = np.concatenate([np.ones(len(ok_s), bool), np.zeros(len(failed_s), bool)])
    faults = [
        _fault(10.0, "kill", "leader", new_leader_s=1.2),
        _fault(20.0, "restart"),
    ]
    (f,) = fault_figures(_records(done, ok), faults, START)
    assert (f.action, f.target, f.member, f.undo) == ("kill", "leader", 1, "restart")
    assert (f.start_s, f.end_s, f.new_leader_s) == (10.0, 20.0, 1.2)
    assert f.unavailable_s == pytest.approx(1.501, abs=0.002)  # last success 9.999, next 11.5
    assert f.unavailable_from_s == pytest.approx(9.999, abs=0.001)
    # the first 1-s window back at 900+ successes is 11.5-12.5 (to the 0.1 s step)
    assert f.recovered and f.recovery_s == pytest.approx(2.5, abs=0.11)
    assert f.errors == {"UNAVAILABLE": 300}
    assert f.p99_before_ms == pytest.approx(2.0) and f.p99_after_ms == pytest.approx(2.0)
    assert f.description == "kill leader at 10 s, restart at 20 s"


def test_a_catch_up_burst_does_not_end_the_recovery_before_the_stall() -> None:
    # 1,000/s, nothing from 10.0 to 12.0, then 1,000 requests in 0.2 s (an
    # open-loop load catching up) and 1,000/s again
    ok_s = np.concatenate(
        [_steady(0, 10, 1000), _steady(12.0, 12.2, 5000), _steady(12.2, 30, 1000)]
    )
    (f,) = fault_figures(
        _records(ok_s, np.ones(len(ok_s), bool)),
        [_fault(10.0, "kill", "leader"), _fault(20.0, "restart")],
        START,
    )
    assert f.unavailable_s == pytest.approx(2.001, abs=0.002)
    # 11.2-12.2 holds the burst and 900+ successes, but served nothing until 12.0
    assert f.recovery_s is not None and f.recovery_s >= f.unavailable_s
    assert f.recovery_s == pytest.approx(2.2, abs=0.11)


def test_a_fault_that_changes_nothing_recovers_at_once() -> None:
    done = _steady(0, 20, 500)
    (f,) = fault_figures(
        _records(done, np.ones(len(done), bool)),
        [_fault(5.0, "kill", "follower"), _fault(8.0, "restart")],
        START,
    )
    assert f.recovery_s == 0.0 and f.recovered
    assert f.unavailable_s == pytest.approx(0.002, abs=1e-6)  # the steady spacing
    assert f.errors == {}


def test_a_load_that_never_comes_back_is_said_so() -> None:
    ok_s = _steady(0, 6, 1000)
    failed_s = _steady(6, 12, 100)
    done = np.concatenate([ok_s, failed_s])
    ok = np.concatenate([np.ones(len(ok_s), bool), np.zeros(len(failed_s), bool)])
    records = _records(done, ok, kinds=("UNAVAILABLE", "DEADLINE_EXCEEDED"))
    (f,) = fault_figures(records, [_fault(6.0, "kill", "leader")], START)
    assert not f.recovered and f.recovery_s is None and f.end_s is None and f.undo == ""
    # from the last success to the last completion of the load
    assert f.unavailable_s == pytest.approx(12 - 0.01 - 5.999, abs=0.002)
    assert f.errors == {"UNAVAILABLE": 300, "DEADLINE_EXCEEDED": 300}
    assert f.p99_during_ms is None and f.p99_after_ms is None


def test_slower_requests_during_a_pause_show_in_its_p99() -> None:
    before = _steady(0, 10, 200)
    during = _steady(10, 15, 200)
    after = _steady(15, 25, 200)
    done = np.concatenate([before, during, after])
    records = _records(done, np.ones(len(done), bool))
    slow = slice(len(before), len(before) + len(during))
    records.latency_ns[slow] = int(500e6)
    records.due_ns[slow] -= int(498e6)  # the same completions, due earlier
    (f,) = fault_figures(records, [_fault(10.0, "pause", "0"), _fault(15.0, "resume")], START)
    assert f.p99_before_ms == pytest.approx(2.0)
    assert f.p99_during_ms == pytest.approx(500.0)
    assert f.p99_after_ms == pytest.approx(2.0)
    assert f.slowest_ms == pytest.approx(500.0)


def test_windows_pair_each_undo_with_the_latest_fault_still_in_effect() -> None:
    faults = [
        _fault(1.0, "kill", "0", member=0),
        _fault(2.0, "pause", "1", member=1),
        _fault(3.0, "resume", member=1),
        _fault(4.0, "restart", member=0),
        _fault(5.0, "kill", "leader", member=2, error="no member was reported as leader"),
    ]
    found = windows(faults, START)
    assert [(w.number, w.fault.action, w.start_s, w.end_s) for w in found] == [
        (1, "kill", 1.0, 4.0),
        (2, "pause", 2.0, 3.0),
    ]


def test_no_records_or_no_faults_give_no_figures() -> None:
    done = _steady(0, 5, 100)
    records = _records(done, np.ones(len(done), bool))
    assert fault_figures(records, [], START) == []
    assert fault_figures(None, [_fault(1.0, "kill", "0")], START) == []
