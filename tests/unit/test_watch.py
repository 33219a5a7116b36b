"""`type: watch`: what the test case may say, and what its saved events
count (missed against the acknowledged puts, duplicates, disorder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dbtester.config.load import load_test_case_text
from dbtester.databases import KINDS
from dbtester.errors import ResultsError
from dbtester.results import WatchEvents
from dbtester.workloads.watch import WatchWorkload
from tests.support.data import watch_events
from tests.unit.problems import problems_of

CASE = """\
title: t
workload:
  type: watch
  requests: 100
  rate: 50
  clients: 10
  connections: 2
databases:
  - {id: a, kind: etcd, version: 3.5.17}
"""


def test_a_watch_case_and_its_defaults() -> None:
    workload = load_test_case_text(CASE, "case.yaml").case.workload
    assert isinstance(workload, WatchWorkload)
    assert (workload.type, workload.watchers, workload.watch_connections) == ("watch", 10, 1)
    assert (
        "watchers"
        not in load_test_case_text(
            CASE.replace("type: watch", "type: write").replace("  rate: 50\n", ""), "c.yaml"
        ).case.workload.as_raw()
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("  rate: 50\n", ""), "type: watch needs rate above 0"),
        (
            ("  rate: 50\n", "  rate: 50\n  same_key: true\n"),
            "same_key means nothing for type: watch",
        ),
        (("  rate: 50\n", "  rate: 50\n  client_steps: [1, 2]\n"), "client_steps cannot"),
        (("  rate: 50\n", "  rate: 50\n  watchers: 2\n  watch_connections: 3\n"), "must not"),
        (("type: watch", "type: write"), "watchers"),  # no such key for a write...
    ],
)
def test_what_a_watch_case_may_not_say(change: tuple[str, str], words: str) -> None:
    text = CASE.replace(*change)
    if change == ("type: watch", "type: write"):
        text = text.replace("  rate: 50\n", "  rate: 50\n  watchers: 3\n")
        words = "watchers is for type: watch only, not write"
    problems = problems_of(text)
    assert any(words in p for p in problems), problems


def test_a_kind_that_cannot_watch_is_refused_at_its_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every kind shipped watches; a kind added without watchers must say so.
    monkeypatch.setattr(KINDS["consul"], "watches", False)
    problems = problems_of(CASE.replace("kind: etcd", "kind: consul"))
    assert any("kind consul cannot run type: watch yet" in p for p in problems), problems
    assert any("etcd, zookeeper" in p for p in problems), problems


def test_a_search_cannot_watch() -> None:
    case = CASE.replace("  requests: 100\n  rate: 50\n", "")
    problems = problems_of(case + "search: {slo_ms: 5}\n")
    assert any("3:3: a search cannot run type: watch" in p for p in problems), problems


def test_missed_counts_only_acknowledged_puts(tmp_path: Path) -> None:
    events = watch_events(tmp_path)
    assert events.acknowledged().sum() == 69
    # watcher 1 saw 68 keys, 8 of them coalesced into earlier keys' replies
    assert events.received().tolist() == [70, 60]
    assert events.coalesced.tolist() == [0, 8]
    assert events.missed().tolist() == [0, 2]
    # of watcher 1's two, key 3's put was sent before key 69's
    assert events.first_missed() == (1, 3)
    assert events.split.tolist() == [0, 1]
    assert events.duplicates.tolist() == [0, 2] and events.out_of_order.tolist() == [1, 0]
    assert events.arrival_unix_s()[1] == pytest.approx(1_800_000_000.020)
    # per key: watcher 1 missed puts 3 and 69; put 5 was never acknowledged
    # put 5 was never acknowledged, yet both watchers saw it
    assert events.unexpected() == 2
    missing = events.missing()
    assert missing.sum() == 2 and missing[3] == missing[69] == 1
    sent = events.sent_unix_s()
    assert sent[2] == pytest.approx(1_800_000_000.020) and np.isnan(sent[69])
    assert events.duplicate_unix_s().tolist() == pytest.approx([1_800_000_000.03, 1_800_000_000.7])


def test_damaged_events_are_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "watch-events.npz"
    np.savez(path, watcher=np.zeros(1, np.uint16))
    with pytest.raises(ResultsError, match=r"watch-events\.npz"):
        WatchEvents.load(path)
