"""Three real agents run a real 3-member cluster of each kind on loopback."""

from __future__ import annotations

import csv
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from dbtester.databases.base import Peer
from tests.integration.agents import agents, alive, loopback_peers
from tests.support.cluster import VERSIONS, b64, post, wait_serving
from tests.support.poll import poll_until

KEYS = 200


def write_etcd(peers: list[Peer]) -> int:
    for i in range(KEYS):
        post(
            f"{peers[i % 3].url('client')}/v3/kv/put",
            {"key": b64(f"k{i:05d}"), "value": b64("v" * 1024)},
        )
    reply = json.loads(
        post(
            f"{peers[0].url('client')}/v3/kv/range",
            {"key": b64("k"), "range_end": b64("l"), "count_only": True},
        )
    )
    return int(reply["count"])


def write_consul(peers: list[Peer]) -> int:
    for i in range(KEYS):
        request = urllib.request.Request(
            f"{peers[i % 3].url('client')}/v1/kv/k{i:05d}", data=b"v" * 1024, method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.read().strip() == b"true"
    keys = json.loads(post(f"{peers[0].url('client')}/v1/kv/k?keys", method="GET"))
    return len(keys)


def write_zookeeper(peers: list[Peer]) -> int:
    from kazoo.client import KazooClient

    hosts = ",".join(p.address("client") for p in peers)
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=30)
    try:
        zk.ensure_path("/k")
        for i in range(KEYS):
            zk.create(f"/k/{i:05d}", b"v" * 1024)
        return len(zk.get_children("/k"))
    finally:
        zk.stop()
        zk.close()


WRITERS: dict[str, Callable[[list[Peer]], int]] = {
    "etcd": write_etcd,
    "zookeeper": write_zookeeper,
    "consul": write_consul,
}


def _rows(path: Path) -> list[dict[str, str]]:
    """The whole rows of a metrics CSV as far as it is written (none before
    the file is)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    whole = text[: text.rfind("\n") + 1]  # a row being appended is left out
    return list(csv.DictReader(whole.splitlines()))


@pytest.mark.parametrize("kind", ["etcd", "zookeeper", "consul"])
def test_three_agents_run_a_cluster(kind: str, tmp_path: Path, installed_home) -> None:
    home = installed_home(kind, VERSIONS[kind])
    peers = loopback_peers(kind, 3)
    with agents(tmp_path, 3, home=home) as running:
        clients = [agent.client() for agent in running]
        pids = []
        asked_ms = []  # when each member's start was asked: its sampler starts after
        for i, client in enumerate(clients):
            asked_ms.append(time.time() * 1000)
            reply = client.start(
                run_id="run1",
                database_id=f"{kind}-db",
                kind=kind,
                version=VERSIONS[kind],
                member_index=i,
                peers=peers,
                flags={},
            )
            pids.append(reply.pid)
        wait_serving(kind, peers)
        member_dirs = [
            agent.data_root / "runs" / "run1" / f"{kind}-db" / f"member-{i}"
            for i, agent in enumerate(running)
        ]
        assert WRITERS[kind](peers) == KEYS
        # two sampling ticks after the writes, on every member: rows that
        # cover them (a condition, not a guess of how long ticks take)
        written = [len(_rows(d / "metrics.csv")) for d in member_dirs]
        poll_until(
            lambda: all(
                len(_rows(d / "metrics.csv")) >= n + 2
                for d, n in zip(member_dirs, written, strict=True)
            ),
            30,
            interval_s=0.1,
            message="fewer than two samples after the writes",
        )
        for i, client in enumerate(clients):
            status = client.status()
            assert [m.state for m in status.members] == ["running"]
            result = client.stop("run1", f"{kind}-db", i)
            stopped_ms = time.time() * 1000
            assert result.disk_usage_bytes > 0 and not result.archived_to
            target = tmp_path / "out" / f"member-{i}.csv"
            client.fetch("run1", f"{kind}-db", i, "metrics.csv", target)
            rows = list(csv.DictReader(target.open()))
            assert len(rows) >= 3
            stamps = [int(r["unix_ms"]) for r in rows]
            # The sampler's schedule (dbtester/agent/sampler.py): tick k is due
            # k seconds after it started, on the monotonic clock, never sooner
            # and never pushed back by a late tick (no drift); one more row is
            # taken at the stop request. The sampler started after its start
            # was asked, so row k (tick k + 1) is stamped no sooner than
            # asked + (k + 1) s; 2 ms for whole-ms stamps and the wall clock's
            # slew against the monotonic one. No upper bound: a busy machine
            # may run a tick late, which the schedule does not forbid.
            ticks = stamps[:-1]
            for k, stamp in enumerate(ticks):
                assert stamp >= asked_ms[i] + (k + 1) * 1000 - 2, (k, stamps, asked_ms[i])
            # in order, the last one taken at the stop (causal: after the last
            # tick, before the stop's reply)
            assert ticks == sorted(ticks), stamps
            assert ticks[-1] <= stamps[-1] <= stopped_ms + 2, (stamps, stopped_ms)
            assert max(float(r["cpu_percent"]) for r in rows) > 0
            assert min(int(r["rss_bytes"]) for r in rows) > 0
            assert sum(int(r["voluntary_ctxt_switches"]) for r in rows) > 0
            assert sum(int(r["receive_bytes"]) for r in rows) > 0
            assert all(int(r[c]) >= 0 for r in rows for c in r if c not in ("cpu_percent",))
            member_dir = member_dirs[i]
            assert not (member_dir / "data").exists()  # removed after a clean stop
            assert (member_dir / "database.log").stat().st_size > 0
        for pid in pids:
            assert not alive(pid)
