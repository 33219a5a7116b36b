"""`type: watch` end to end on a real 3-member etcd, ZooKeeper and Consul:
20 watchers (over 4 connections where the kind multiplexes them) see every
one of 1,000 puts, and the table has the events' latency beside the puts'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dbtester.results import WatchEvents
from tests.e2e.test_run import _dbtester
from tests.integration.test_agent_cluster import VERSIONS

pytestmark = pytest.mark.integration

WATCHERS = 20
PUTS = 1000


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, installed_home) -> Path:
    """One run of 20 watchers x 1,000 puts on a 3-member cluster of each kind."""
    for kind, version in VERSIONS.items():
        home = Path(installed_home(kind, version))
    case = {
        "title": "e2e watch",
        "workload": {
            "type": "watch",
            "requests": PUTS,
            "rate": 500,
            "key_size": 64,
            "value_size": 256,
            "clients": 20,
            "connections": 4,
            "watchers": WATCHERS,
            "watch_connections": 4,
        },
        "databases": [
            {"id": kind, "kind": kind, "version": version, "members": 3}
            for kind, version in VERSIONS.items()
        ],
    }
    tmp_path = tmp_path_factory.mktemp("watch")
    config = tmp_path / "case.yaml"
    config.write_text(yaml.safe_dump(case))
    out = tmp_path / "results"
    result = _dbtester(home, "run", str(config), "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.parametrize("kind", list(VERSIONS))
def test_every_watcher_sees_every_put(watched: Path, kind: str) -> None:
    out = watched
    events = WatchEvents.load(out / kind / "watch-events.npz")
    assert events.watchers == WATCHERS
    assert events.acknowledged().sum() == PUTS
    # Consul's replies bring every put since the last: received + coalesced
    seen = events.received() + events.coalesced.astype(np.int64)
    assert seen.tolist() == [PUTS] * WATCHERS
    if kind != "consul":
        assert int(events.coalesced.sum()) == 0
    assert events.missed().tolist() == [0] * WATCHERS
    assert int(events.duplicates.sum()) == 0 and int(events.out_of_order.sum()) == 0
    assert int(events.foreign.sum()) == 0
    assert len(events) == WATCHERS * PUTS
    # every (event, watcher) pair once, each watcher's keys all the puts'
    for watcher in range(WATCHERS):
        keys = np.sort(events.key[events.watcher == watcher])
        assert keys.tolist() == list(range(PUTS))
    # an event cannot reach a watcher before its put was sent, nor take ages
    assert 0 < float(np.median(events.latency_us)) < 1_000_000
    result = json.loads((out / "result.json").read_text())
    figures = next(d for d in result["databases"] if d["id"] == kind)["figures"]
    assert figures["WATCH-EVENTS-EXPECTED"] == WATCHERS * PUTS
    assert figures["WATCH-EVENTS-RECEIVED"] == int(events.received().sum())
    assert figures["WATCH-EVENTS-RECEIVED"] + figures["WATCH-EVENTS-COALESCED"] == WATCHERS * PUTS
    assert figures["WATCH-EVENTS-MISSED"] == 0
    p99 = float(np.percentile(events.latency_us / 1e3, 99))
    assert figures["WATCH-LATENCY p99"] == pytest.approx(p99)
    table = (out / "summary.txt").read_text()
    assert "WATCH-LATENCY p99" in table and "Latency p99" in table
    assert (out / "charts" / "AVG-WATCH-LATENCY-MS.svg").is_file()
