"""Three real agents run a real 3-member cluster of each kind on loopback."""

from __future__ import annotations

import csv
import itertools
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from dbtester.databases.base import Peer
from tests.integration.agents import agents, alive, loopback_peers
from tests.support.cluster import VERSIONS, b64, post, wait_serving

# tests/e2e/test_faults.py still imports _wait_serving from here (someone else
# is refactoring it): switch it to tests.support.cluster, then drop this alias
# and the hygiene test's exception for it.
_wait_serving = wait_serving

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


@pytest.mark.parametrize("kind", ["etcd", "zookeeper", "consul"])
def test_three_agents_run_a_cluster(kind: str, tmp_path: Path, installed_home) -> None:
    home = installed_home(kind, VERSIONS[kind])
    peers = loopback_peers(kind, 3)
    with agents(tmp_path, 3, home=home) as running:
        clients = [agent.client() for agent in running]
        pids = []
        for i, client in enumerate(clients):
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
        assert WRITERS[kind](peers) == KEYS
        time.sleep(2.5)  # at least two full sampling ticks after the writes
        for i, client in enumerate(clients):
            status = client.status()
            assert [m.state for m in status.members] == ["running"]
            result = client.stop("run1", f"{kind}-db", i)
            assert result.disk_usage_bytes > 0 and not result.archived_to
            target = tmp_path / "out" / f"member-{i}.csv"
            client.fetch("run1", f"{kind}-db", i, "metrics.csv", target)
            rows = list(csv.DictReader(target.open()))
            assert len(rows) >= 3
            stamps = [int(r["unix_ms"]) for r in rows]
            gaps = [b - a for a, b in itertools.pairwise(stamps)]
            # one row per second, and a last one taken at the stop request
            assert all(800 <= g <= 1500 for g in gaps[:-1]), gaps
            assert 0 <= gaps[-1] <= 1500, gaps
            assert max(float(r["cpu_percent"]) for r in rows) > 0
            assert min(int(r["rss_bytes"]) for r in rows) > 0
            assert sum(int(r["voluntary_ctxt_switches"]) for r in rows) > 0
            assert sum(int(r["receive_bytes"]) for r in rows) > 0
            assert all(int(r[c]) >= 0 for r in rows for c in r if c not in ("cpu_percent",))
            member_dir = running[i].data_root / "runs" / "run1" / f"{kind}-db" / f"member-{i}"
            assert not (member_dir / "data").exists()  # removed after a clean stop
            assert (member_dir / "database.log").stat().st_size > 0
        for pid in pids:
            assert not alive(pid)
