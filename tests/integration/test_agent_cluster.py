"""Three real agents run a real 3-member cluster of each kind on loopback."""

from __future__ import annotations

import base64
import csv
import itertools
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from dbtester.databases import KINDS
from dbtester.databases.base import Peer
from tests.integration.agents import agents, alive, loopback_peers

VERSIONS = {"etcd": "3.5.17", "zookeeper": "3.8.0", "consul": "1.22.0"}
KEYS = 200


def _post(url: str, body: dict[str, object] | None = None, method: str = "POST") -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return bytes(reply.read())


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_etcd(peers: list[Peer]) -> int:
    for i in range(KEYS):
        _post(
            f"{peers[i % 3].url('client')}/v3/kv/put",
            {"key": _b64(f"k{i:05d}"), "value": _b64("v" * 1024)},
        )
    reply = json.loads(
        _post(
            f"{peers[0].url('client')}/v3/kv/range",
            {"key": _b64("k"), "range_end": _b64("l"), "count_only": True},
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
    keys = json.loads(_post(f"{peers[0].url('client')}/v1/kv/k?keys", method="GET"))
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


def _wait_serving(kind: str, peers: list[Peer], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not all(KINDS[kind].serving(p) for p in peers):
        assert time.monotonic() < deadline, f"{kind} cluster not serving after {timeout}s"
        time.sleep(0.25)


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
        _wait_serving(kind, peers)
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
