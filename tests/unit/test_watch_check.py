"""check: {model: watch}: a watch load's watchers held to what a watch
promises, from the counts the engine kept."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dbtester.analyze.correctness import FaultSpan, describe, judge_watch
from tests.support.data import watch_events

ORIGIN_S = 1_800_000_000.0


def test_every_kind_of_breach_is_counted_per_watcher(tmp_path: Path) -> None:
    # watcher 0: one event out of order; watcher 1: two missed, two
    # duplicated, one split revision
    record = judge_watch(watch_events(tmp_path), on_violation="report")
    assert record.model == "watch" and not record.held
    counts = record.watch
    assert counts is not None
    assert (counts.missed, counts.duplicated, counts.out_of_order, counts.split) == (2, 2, 1, 1)
    assert counts.violated_watchers == (0, 1)
    assert counts.events_expected == 2 * 69
    assert describe(record) == "VIOLATED (2 of 2 watchers)"


def test_the_first_breach_in_time_is_written_out(tmp_path: Path) -> None:
    events = watch_events(tmp_path)
    # the first missed put (key 3) was sent at 30 ms, before any duplicate
    events = replace(events, duplicate_ms=np.array([700, 800], np.uint32))
    fault = FaultSpan("fault 1 (kill leader)", ORIGIN_S + 0.02, ORIGIN_S + 0.5)
    record = judge_watch(events, on_violation="fail", faults=[fault])
    violation = record.violation
    assert violation is not None
    assert violation.key == "watcher 1" and "put 3 of the load" in violation.reason
    assert violation.during_fault == "fault 1 (kill leader)"
    # an event that never came was due from its put on: a fault after the
    # put was sent is one it fell in, one over before it is not
    later = FaultSpan("fault 2 (pause leader)", ORIGIN_S + 0.6, ORIGIN_S + 0.7)
    over = FaultSpan("fault 0 (kill follower)", ORIGIN_S - 1.0, ORIGIN_S + 0.01)
    violation = judge_watch(events, on_violation="fail", faults=[over, later]).violation
    assert violation is not None and violation.during_fault == "fault 2 (pause leader)"
    # a duplicate that came first is the first breach, outside the fault
    events = replace(events, duplicate_ms=np.array([5, 800], np.uint32))
    violation = judge_watch(events, on_violation="fail", faults=[fault]).violation
    assert violation is not None and "received an event it had received already" in violation.reason
    assert violation.during_fault == ""


def test_order_alone_is_a_breach_without_a_time(tmp_path: Path) -> None:
    events = watch_events(tmp_path)
    every_key = np.full_like(events.seen, np.uint64(2**64 - 1))
    clean = replace(
        events,
        seen=every_key,
        duplicates=np.zeros(2, np.uint64),
        duplicate_watcher=np.zeros(0, np.uint16),
        duplicate_ms=np.zeros(0, np.uint32),
        split=np.zeros(2, np.uint64),
    )
    violation = judge_watch(clean, on_violation="fail").violation
    assert violation is not None
    assert (violation.key, violation.reason) == ("watcher 0", "received 1 event out of order")
    held = judge_watch(replace(clean, out_of_order=np.zeros(2, np.uint64)), on_violation="fail")
    assert held.held and held.violation is None
    assert describe(held) == "watch guarantees held (138 events)"
