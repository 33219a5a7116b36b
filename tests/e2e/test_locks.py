"""``type: lock`` on real etcd clusters: lockers contend through etcd's own
lock recipe, every acquisition is kept and judged, and a recipe broken by a
proxy in front of etcd (two holders at once) is caught."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np

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
    """Twenty lockers on a 3-member etcd take one lock 400 times: each
    acquisition begins after the previous holder's release began, the
    fencing tokens (the keys' create revisions) rise, and the rows count
    every acquisition and session."""
    home = installed_home("etcd", VERSIONS["etcd"])
    case = {
        "title": "one lock",
        "workload": {"type": "lock", "requests": 400, "lockers": 20, "hold_ms": 1},
        "databases": [{"id": "etcd", "kind": "etcd", "version": VERSIONS["etcd"], "members": 3}],
    }
    done, out = run_case(home, case, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CORRECTNESS"] == "locks held exclusively (400 acquisitions)"
    assert figures["LOCKS-ACQUIRED"] == 400 and figures["LOCK-SESSIONS"] == 20
    assert figures["FAILED-RELEASES"] == 0
    assert 0 < figures["HANDOVER-P50-MS"] <= figures["HANDOVER-MAX-MS"]
    assert figures["WAIT-FAIRNESS"] >= 1
    holds = LockHolds.load(out / "etcd" / "lock-holds.npz")
    assert len(holds) == 400 and set(holds.locker.tolist()) == set(range(20))
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


def test_zookeeper_hands_its_lock_on_through_sequential_nodes(
    tmp_path: Path, installed_home
) -> None:
    """Ten lockers on a 3-member ZooKeeper take one lock 200 times through
    its recipe (ephemeral sequential nodes, each watching the one below it):
    one holder at a time, the sequence numbers (tokens) rising by one per
    acquisition, each locker's session its connection's."""
    home = installed_home("zookeeper", VERSIONS["zookeeper"])
    case = {
        "title": "one lock",
        "workload": {"type": "lock", "requests": 200, "lockers": 10, "hold_ms": 1},
        "databases": [
            {"id": "zk", "kind": "zookeeper", "version": VERSIONS["zookeeper"], "members": 3}
        ],
    }
    done, out = run_case(home, case, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CORRECTNESS"] == "locks held exclusively (200 acquisitions)"
    assert figures["LOCK-SESSIONS"] == 10 and figures["FAILED-RELEASES"] == 0
    one = LockHolds.load(out / "zk" / "lock-holds.npz").of_lock(0)
    # every acquisition made one node: the sequence rises by exactly one
    assert np.diff(one.token).tolist() == [1] * 199
    assert (one.acquired_ns[1:] >= one.released_ns[:-1]).all()


def test_consul_hands_its_lock_on_through_sessions(tmp_path: Path, installed_home) -> None:
    """Ten lockers on a 3-member Consul take one lock 100 times as its API
    client's Lock does (a session each, ?acquire, a blocking query while
    another holds it): one holder at a time, the LockIndex (token) rising
    by one per acquisition, the lock-delay left at Consul's 15 s."""
    home = installed_home("consul", VERSIONS["consul"])
    database = {"id": "consul", "kind": "consul", "version": VERSIONS["consul"], "members": 3}
    case = {
        "title": "one lock",
        "workload": {"type": "lock", "requests": 100, "lockers": 10, "hold_ms": 1},
        "databases": [{**database, "flags": {"raft_multiplier": 1}}],
    }
    done, out = run_case(home, case, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CORRECTNESS"] == "locks held exclusively (100 acquisitions)"
    assert figures["LOCK-SESSIONS"] == 10 and figures["FAILED-RELEASES"] == 0
    one = LockHolds.load(out / "consul" / "lock-holds.npz").of_lock(0)
    assert np.diff(one.token).tolist() == [1] * 99
    assert (one.acquired_ns[1:] >= one.released_ns[:-1]).all()
