"""The throughput search against a server whose capacity is known exactly:
slowput -serial answers one Put at a time after 5 ms, so it serves 200/s at
most (a little less: each sleep overshoots)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dbtester.analyze.probes import ProbeRule
from dbtester.config.model import Workload
from dbtester.control.search import SearchOutcome, search_rate
from dbtester.databases.base import LoadSettings
from tests.integration.test_load import slow_server, slowput_binary  # noqa: F401

pytestmark = pytest.mark.integration

CAPACITY = 200.0


def _search(
    start_server: Callable[..., str],
    out: Path,
    *,
    slo_ms: float,
    hold_s: float,
    start_rate: float,
    budget_s: float,
    say: Callable[[str], None] = lambda line: None,
) -> SearchOutcome:
    """A p99 search at 5% precision against a fresh serial slowput, with 50
    clients on 2 connections: many requests in flight, so a queue at the
    server (not the client) is what limits the rate."""
    endpoint = start_server("-delay", "5ms", "-serial")
    settings = LoadSettings((endpoint,), {"balancer": "pick_first"}, 64, 256, "linearizable", 30.0)
    workload = Workload(
        type="write", requests=1, key_size=64, value_size=256, clients=50, connections=2
    )
    return search_rate(
        "etcd",
        settings,
        workload,
        out,
        rule=ProbeRule(slo_ms=slo_ms, percentile=99),
        hold_s=hold_s,
        start_rate=start_rate,
        precision=0.05,
        budget_s=budget_s,
        workers=1,
        say=say,
    )


def test_a_loose_target_finds_the_servers_capacity(tmp_path: Path, slow_server) -> None:  # noqa: F811
    lines: list[str] = []
    outcome = _search(
        slow_server,
        tmp_path,
        slo_ms=100.0,
        hold_s=3.0,
        start_rate=50.0,
        budget_s=240.0,
        say=lines.append,
    )
    print("\n".join(lines))
    assert outcome.stopped == "precision"
    assert outcome.maximum is not None and outcome.failing is not None
    assert 0.9 * CAPACITY <= outcome.maximum <= 1.1 * CAPACITY, lines
    assert (outcome.failing - outcome.maximum) / outcome.maximum <= 0.05
    # doubled from 50/s until the first failure, and every probe said so
    assert [p.offered for p in outcome.probes[:3]] == [50.0, 100.0, 200.0]
    assert len(lines) == len(outcome.probes)
    assert lines[0].startswith("probe 1: offered 50/s, answered ")
    # the probes above capacity failed for falling behind or for their queue
    for probe in outcome.probes:
        if probe.offered > 1.1 * CAPACITY:
            assert not probe.passed
    assert (tmp_path / "probe-1" / "client-latency.npz").is_file()


def test_a_target_below_the_service_time_is_met_by_no_rate(
    tmp_path: Path,
    slow_server,  # noqa: F811
) -> None:
    outcome = _search(
        slow_server, tmp_path, slo_ms=2.0, hold_s=2.0, start_rate=16.0, budget_s=120.0
    )
    assert outcome.stopped == "nothing meets the target"
    assert outcome.maximum is None
    assert [p.offered for p in outcome.probes] == [16.0, 8.0, 4.0, 2.0, 1.0]
    assert all("above the 2 ms target" in p.failures[0] for p in outcome.probes)


def test_the_budget_stops_a_search_and_keeps_what_it_found(
    tmp_path: Path,
    slow_server,  # noqa: F811
) -> None:
    outcome = _search(
        slow_server, tmp_path, slo_ms=100.0, hold_s=2.0, start_rate=50.0, budget_s=5.0
    )
    assert outcome.stopped == "time budget"
    assert 1 <= len(outcome.probes) <= 2
    # what it found stands: the rates it had passed, all well under capacity
    assert outcome.maximum == max(p.offered for p in outcome.probes if p.passed)
    assert outcome.maximum in (50.0, 100.0)
