"""``type: lock`` on real etcd clusters: lockers contend through etcd's own
lock recipe, every acquisition is kept and judged, and a recipe broken by a
proxy in front of etcd (two holders at once) is caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from dbtester.analyze.correctness import judge_locks
from dbtester.load.runner import LoadOptions, run_load
from dbtester.proto import etcd_pb2 as pb
from dbtester.proto import etcd_pb2_grpc as rpc
from dbtester.results import DatabaseLayout, LockHolds
from dbtester.workloads import workload_of
from dbtester.workloads.lock import LOCK_PREFIX
from tests.standins.lock_proxy import BlindingProxy
from tests.support.cluster import VERSIONS, cluster, run_case, settings_for

QUIET = LoadOptions(progress=None)


def test_twenty_lockers_hold_one_lock_in_turn(tmp_path: Path, installed_home) -> None:
    """Twenty lockers on a 3-member etcd take one lock 200 times: each
    acquisition begins after the previous holder's release began, the
    fencing tokens (the keys' create revisions) rise, and the rows count
    every acquisition and session."""
    home = installed_home("etcd", VERSIONS["etcd"])
    case = {
        "title": "one lock",
        "workload": {"type": "lock", "requests": 200, "lockers": 20, "hold_ms": 1},
        "databases": [{"id": "etcd", "kind": "etcd", "version": VERSIONS["etcd"], "members": 3}],
    }
    done, out = run_case(home, case, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CORRECTNESS"] == "locks held exclusively (200 acquisitions)"
    assert figures["LOCKS-ACQUIRED"] == 200 and figures["LOCK-SESSIONS"] == 20
    assert figures["FAILED-RELEASES"] == 0
    assert 0 < figures["HANDOVER-P50-MS"] <= figures["HANDOVER-MAX-MS"]
    assert figures["WAIT-FAIRNESS"] >= 1
    holds = LockHolds.load(out / "etcd" / "lock-holds.npz")
    assert len(holds) == 200 and set(holds.locker.tolist()) == set(range(20))
    one = holds.of_lock(0)
    assert (np.diff(one.token) > 0).all()
    assert (one.acquired_ns[1:] >= one.released_ns[:-1]).all()
    run = json.loads((out / "etcd" / "run.json").read_text())
    assert run["correctness"]["model"] == "lock" and run["correctness"]["violation"] is None


def test_two_holders_at_once_are_caught(tmp_path: Path, installed_home) -> None:
    """Through a proxy that hides every contender's predecessor, four
    lockers each believe they hold the one lock: the check names the lock
    and the two holders; without the proxy, on the same etcd, it holds, and
    the sessions leave no key behind."""
    home = installed_home("etcd", VERSIONS["etcd"])
    workload = workload_of(type="lock", requests=40, lockers=4, hold_ms=20)
    with cluster("etcd", 1, tmp_path, home) as (peers, _):
        with BlindingProxy(peers[0].address("client")) as proxy:
            settings = settings_for(peers, endpoints=(proxy.endpoint,))
            broken = run_load("etcd", settings, workload, DatabaseLayout(tmp_path / "b"), QUIET)
        assert proxy.blinded > 0
        assert broken.lock_holds is not None
        judged = judge_locks(broken.lock_holds, on_violation="fail")
        assert judged.violation is not None and judged.violation.key == "lock 0"
        assert "while locker" in judged.violation.reason
        fine = run_load(
            "etcd", settings_for(peers), workload, DatabaseLayout(tmp_path / "f"), QUIET
        )
        assert fine.lock_holds is not None and len(fine.lock_holds) == 40
        assert judge_locks(fine.lock_holds, on_violation="fail").violation is None
        with grpc.insecure_channel(peers[0].address("client")) as channel:
            prefix = LOCK_PREFIX.encode()
            left = rpc.KVStub(channel).Range(
                pb.RangeRequest(key=prefix, range_end=prefix[:-1] + b"0", count_only=True)
            )
        assert left.count == 0


#: each kind's recipe with ten lockers on one lock: its flags, and acquisitions
RECIPES = {
    # ephemeral sequential nodes, each locker watching the one below its own
    "zookeeper": ({}, 100),
    # a session each, ?acquire, a blocking query while another holds the key
    "consul": ({"raft_multiplier": 1}, 100),
}


@pytest.mark.parametrize("kind", sorted(RECIPES))
def test_each_kinds_recipe_hands_its_lock_on(kind: str, tmp_path: Path, installed_home) -> None:
    """Ten lockers on a 3-member cluster take one lock through the kind's
    recipe: one holder at a time, the token (ZooKeeper's sequence number,
    Consul's LockIndex) rising by exactly one per acquisition."""
    flags, requests = RECIPES[kind]
    home = installed_home(kind, VERSIONS[kind])
    database: dict[str, Any] = {"id": "db", "kind": kind, "version": VERSIONS[kind], "members": 3}
    case = {
        "title": "one lock",
        "workload": {"type": "lock", "requests": requests, "lockers": 10, "hold_ms": 1},
        "databases": [{**database, "flags": flags}],
    }
    done, out = run_case(home, case, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CORRECTNESS"] == f"locks held exclusively ({requests} acquisitions)"
    assert figures["LOCK-SESSIONS"] == 10 and figures["FAILED-RELEASES"] == 0
    one = LockHolds.load(out / "db" / "lock-holds.npz").of_lock(0)
    assert np.diff(one.token).tolist() == [1] * (requests - 1)
    assert (one.acquired_ns[1:] >= one.released_ns[:-1]).all()
