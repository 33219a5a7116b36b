"""The engine's watchers against the etcd stand-in, which misbehaves on
purpose: every event it drops, sends twice or sends out of order is counted
exactly; a watcher whose watch it cancels mid-run misses exactly the puts
after that; and a stream it ends is opened again, the watches resumed from
the last revision each watcher saw, with nothing missed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dbtester.analyze.correctness import judge_watch
from dbtester.databases.base import LoadSettings
from dbtester.load import LoadOptions, run_load
from dbtester.results import DatabaseLayout, WatchEvents
from dbtester.workloads import workload_of
from tests.standins.etcd import EtcdStandIn, Misbehave

pytestmark = pytest.mark.integration

PUTS = 400
WATCHERS = 4


def _watched(
    tmp_path: Path,
    misbehave: Misbehave,
    *,
    rate: float = 1000.0,
    streams: int = 1,
    drain_s: float = 1.0,
) -> tuple[WatchEvents, dict[str, int]]:
    """What the watchers saw, and what the stand-in did wrong, by switch."""
    with EtcdStandIn(misbehave) as etcd:
        settings = LoadSettings(
            (etcd.endpoint,), {"balancer": "pick_first"}, 16, 32, "linearizable", 1.5
        )
        workload = workload_of(
            type="watch",
            requests=PUTS,
            rate=rate,
            key_size=16,
            value_size=32,
            clients=8,
            connections=2,
            watchers=WATCHERS,
            watch_connections=streams,
            # after the last put, the watchers wait this long at most for
            # what they have not received (and some events never come)
            request_timeout_s=drain_s,
        )
        result = run_load(
            "etcd", settings, workload, DatabaseLayout(tmp_path / "db"), LoadOptions(progress=None)
        )
        misdeeds = dict(etcd.misdeeds)
    assert result.watch is not None
    assert result.records.counts().get("ok") == PUTS
    assert int(result.watch.acknowledged().sum()) == PUTS
    return result.watch, misdeeds


def test_an_honest_stand_in_delivers_everything_once_in_order(tmp_path: Path) -> None:
    events, misdeeds = _watched(tmp_path, Misbehave())
    assert misdeeds == {}
    assert events.received().tolist() == [PUTS] * WATCHERS
    assert int(events.missed().sum()) == 0
    assert int(events.duplicates.sum()) == 0 and int(events.out_of_order.sum()) == 0


def test_dropped_events_are_missed_exactly(tmp_path: Path) -> None:
    events, misdeeds = _watched(tmp_path, Misbehave(drop_events=0.05))
    assert misdeeds["drop_events"] > 0
    assert int(events.missed().sum()) == misdeeds["drop_events"]
    assert int(events.received().sum()) == WATCHERS * PUTS - misdeeds["drop_events"]
    # check: {model: watch} names the first: its watcher and its put
    record = judge_watch(events, on_violation="fail")
    assert record.watch is not None and record.watch.missed == misdeeds["drop_events"]
    first = events.first_missed()
    assert first is not None and record.violation is not None
    assert record.violation.key == f"watcher {first[0]}"
    assert f"put {first[1]} of the load" in record.violation.reason


def test_events_sent_twice_are_duplicates_exactly(tmp_path: Path) -> None:
    events, misdeeds = _watched(tmp_path, Misbehave(duplicate_events=0.05))
    assert misdeeds["duplicate_events"] > 0
    assert int(events.duplicates.sum()) == misdeeds["duplicate_events"]
    assert int(events.missed().sum()) == 0 and int(events.out_of_order.sum()) == 0
    # a duplicate is no second sample: one latency per (event, watcher)
    assert len(events) == WATCHERS * PUTS


def test_events_out_of_order_are_counted_exactly(tmp_path: Path) -> None:
    # fast puts, so events wait together and go out newest first (a stream
    # per watcher: reordering swaps events of one watch only)
    events, misdeeds = _watched(
        tmp_path, Misbehave(reorder_events=True), rate=4000.0, streams=WATCHERS
    )
    assert misdeeds.get("reorder_events", 0) > 0
    assert int(events.out_of_order.sum()) == misdeeds["reorder_events"]
    assert int(events.missed().sum()) == 0 and int(events.duplicates.sum()) == 0


def test_a_watcher_stopped_mid_run_misses_exactly_what_came_after(tmp_path: Path) -> None:
    after = 150
    events, misdeeds = _watched(tmp_path, Misbehave(cancel_watch_after=after))
    assert misdeeds["cancel_watch_after"] == 1
    # the first watch created is watcher 0's; it saw the first 150 puts' events
    assert events.missed().tolist() == [PUTS - after] + [0] * (WATCHERS - 1)
    assert events.received().tolist() == [after] + [PUTS] * (WATCHERS - 1)
    # (the first 150 by revision: concurrent writers need not put keys in order)
    first = events.key[events.watcher == 0]
    assert len(first) == len(np.unique(first)) == after


def test_a_stream_that_ends_is_resumed_from_the_last_revision(tmp_path: Path) -> None:
    # the drain ends as soon as every watcher has everything
    events, misdeeds = _watched(tmp_path, Misbehave(end_streams_after=100), drain_s=10.0)
    assert misdeeds["end_streams_after"] >= 2
    assert events.received().tolist() == [PUTS] * WATCHERS
    assert int(events.missed().sum()) == 0
    assert int(events.duplicates.sum()) == 0 and int(events.out_of_order.sum()) == 0


def test_a_revision_split_across_responses_is_counted_exactly(tmp_path: Path) -> None:
    # every second put shares the revision of the one before, and each is a
    # response of its own: two keys of one revision, in two responses
    events, misdeeds = _watched(tmp_path, Misbehave(split_revisions=True))
    assert misdeeds["split_revisions"] == WATCHERS * PUTS // 2
    assert int(events.split.sum()) == misdeeds["split_revisions"]
    # events of one revision are in order, and none is missed or twice
    assert int(events.out_of_order.sum()) == 0 and int(events.missed().sum()) == 0
    assert int(events.duplicates.sum()) == 0
