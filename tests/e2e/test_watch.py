"""`type: watch` end to end on a real 3-member etcd, ZooKeeper and Consul:
20 watchers (over 4 connections where the kind multiplexes them) see every
one of 1,000 puts, the table has the events' latency beside the puts', and
`check: {model: watch}` holds every watcher to it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dbtester.results import WatchEvents
from tests.support.cases import database, fast_elections, make_case, write_case
from tests.support.cluster import VERSIONS, dbtester

pytestmark = pytest.mark.integration

WATCHERS = 20
PUTS = 1000


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, installed_home) -> Path:
    """One run of 20 watchers x 1,000 puts on a 3-member cluster of each kind."""
    tmp_path = tmp_path_factory.mktemp("watch")
    return _run(tmp_path, installed_home, puts=PUTS, watchers=WATCHERS, connections=4)


def _run(
    tmp_path: Path,
    installed_home,
    *,
    puts: int,
    watchers: int,
    connections: int,
    faults: list[dict[str, str]] | None = None,
    on_violation: str = "fail",
    charts: bool = True,
    fast_consul: bool = False,
) -> Path:
    """A run of ``watchers`` watching ``puts`` puts at 500/s from 20 clients
    on a 3-member cluster of each kind (its charts and report drawn, unless
    not ``charts``; Consul at production timing with ``fast_consul``); the
    results directory."""
    for kind, version in VERSIONS.items():
        home = Path(installed_home(kind, version))
    workload = {"type": "watch", "requests": puts, "rate": 500, "connections": connections}
    workload |= {"watchers": watchers, "watch_connections": connections}
    workload |= {"check": {"model": "watch", "on_violation": on_violation}}
    case = make_case(
        title="e2e watch",
        workload=workload,
        databases=[
            database(kind, kind, members=3, **(fast_elections(kind) if fast_consul else {}))
            for kind in VERSIONS
        ],
        **({"faults": faults} if faults else {}),
    )
    config = write_case(tmp_path / "case.yaml", case)
    out = tmp_path / "results"
    no_charts = () if charts else ("--no-charts",)
    result = dbtester(home, "run", *no_charts, str(config), "--out", str(out), timeout=600)
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
    # Causal, on the engine's one monotonic clock (docs/watch.md): an event
    # reaches a watcher after its put was sent (whole ms, floored alike), and
    # after a round trip through the database, never in 0 µs. How long it
    # takes is the measurement, not a promise: no upper bound.
    assert bool(np.all(events.arrival_ms >= events.sent_ms[events.key]))
    assert float(np.median(events.latency_us)) > 0
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
    svg = (out / "charts" / "WATCH-P99-LATENCY-BY-WATCHER.svg").read_text()
    assert "by watcher" in svg
    report = (out / "report.html").read_text()
    assert "WATCH-P99-LATENCY-BY-WATCHER" in report and "WATCH-EVENTS-COALESCED" in report
    # check: {model: watch} (on_violation: fail, and the run passed)
    correctness = json.loads((out / kind / "run.json").read_text())["correctness"]
    assert correctness["model"] == "watch" and correctness["violation"] is None
    assert correctness["watch"]["violated_watchers"] == []
    assert figures["CORRECTNESS"] == f"watch guarantees held ({WATCHERS * PUTS:,} events)"


FAULT_PUTS = 3000


def test_watchers_across_a_leader_kill(tmp_path: Path, installed_home) -> None:
    """The leader killed at 1 s and restarted at 4 s while 10 watchers watch
    3,000 puts at 500/s: etcd's watchers resume from the last revision and
    miss nothing; on every kind the fault's own rows count what the
    watchers missed of the puts sent from it on."""
    kill_and_restart = [
        {"at": "1s", "action": "kill", "member": "leader"},
        {"at": "4s", "action": "restart"},
    ]
    out = _run(
        tmp_path,
        installed_home,
        puts=FAULT_PUTS,
        watchers=10,
        connections=3,
        faults=kill_and_restart,
        on_violation="report",
        # its figures and records only: the charts are the test above's
        charts=False,
        # Consul names a new leader while its old one is down (at its
        # default timing, 7 s after the kill: after the restart), and the
        # run is 15 s shorter
        fast_consul=True,
    )
    summary = json.loads((out / "result.json").read_text())
    for db in summary["databases"]:
        kind, figures = db["id"], db["figures"]
        events = WatchEvents.load(out / kind / "watch-events.npz")
        run = json.loads((out / kind / "run.json").read_text())
        load_start = run["load"]["started_unix"]
        kill = run["faults"][0]
        assert not kill["error"], kill
        # the window's puts: sent from the kill on (there is one window)
        sent_s = events.sent_unix_s()
        after = sent_s >= kill["unix"] - 0.0005  # sent times are whole ms
        missed = int(events.missing()[after].sum())
        assert figures["FAULT-1-WATCH-MISSED"] == pytest.approx(missed, abs=1), kind
        assert figures["FAULT-1-WATCH-MISSED"] <= figures["WATCH-EVENTS-MISSED"], kind
        assert figures["FAULT-1-WATCH-DUPLICATED"] <= figures["WATCH-EVENTS-DUPLICATED"], kind
        assert figures["FAULT-1-WATCH-P99-MS"] > 0, kind
        # puts whose reply was lost may have taken effect: their events are
        # received, but not expected
        seen = figures["WATCH-EVENTS-RECEIVED"] + figures["WATCH-EVENTS-COALESCED"]
        expected = seen - events.unexpected() + figures["WATCH-EVENTS-MISSED"]
        assert expected == figures["WATCH-EVENTS-EXPECTED"], kind
        # the kill waits 1 s after the load's start, its first due request
        # with every session open: the load had connected before it. Its
        # time is the agent's less the agent's clock offset, known within
        # half a clock probe's round trip: 0.1 s allows for a slow probe.
        assert kill["unix"] - load_start > 1.0 - 0.1
        # (sent times are whole ms)
        assert load_start <= float(sent_s[np.isfinite(sent_s)].min()) + 0.001
        # the verdict counts what the figures count
        watch = run["correctness"]["watch"]
        assert watch["missed"] == figures["WATCH-EVENTS-MISSED"], kind
        assert watch["duplicated"] == figures["WATCH-EVENTS-DUPLICATED"], kind
        assert watch["out_of_order"] == figures["WATCH-EVENTS-OUT-OF-ORDER"], kind
        held = not watch["violated_watchers"]
        assert figures["CORRECTNESS"].startswith("watch guarantees held" if held else "VIOLATED")
        if not held:  # the first breach, named with its watcher
            violation = run["correctness"]["violation"]
            assert violation["key"].startswith("watcher "), violation
            # and with the fault, when it fell in one: a put sent after the
            # restart can be missed too (a CI run missed put 2995 at 6 s)
            assert violation["during_fault"] in ("", "fault 1 (kill leader at 1 s, restart at 4 s)")
    etcd = next(d for d in summary["databases"] if d["id"] == "etcd")["figures"]
    assert etcd["WATCH-EVENTS-MISSED"] == 0 and etcd["WATCH-EVENTS-DUPLICATED"] == 0
    assert etcd["CORRECTNESS"].startswith("watch guarantees held")
