"""The engine's mixed workload against the etcd stand-in: what a real etcd
rarely does (a wrong value, a lost race) is caught and counted; and the
stand-in's own switches do what they say, for the tests that rely on them."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from dbtester.databases.base import LoadSettings
from dbtester.load import LoadOptions, load_keys, run_load
from dbtester.proto import etcd_pb2 as pb
from dbtester.proto import etcd_pb2_grpc as rpc
from dbtester.results import DatabaseLayout
from dbtester.workloads import Workload, workload_of
from tests.standins.etcd import EtcdStandIn, Misbehave

pytestmark = pytest.mark.integration


def _settings(endpoint: str) -> LoadSettings:
    return LoadSettings((endpoint,), {"balancer": "pick_first"}, 16, 64, "linearizable", 5.0)


def _mixed(key_count: int = 50, **shares: float) -> Workload:
    return workload_of(
        type="mixed",
        requests=600,
        key_size=16,
        value_size=64,
        clients=20,
        connections=2,
        key_count=key_count,
        request_distribution="uniform",
        read_proportion=shares.get("read", 0.0),
        update_proportion=shares.get("update", 0.0),
        insert_proportion=shares.get("insert", 0.0),
        read_modify_write_proportion=shares.get("read_modify_write", 0.0),
    )


def _run(tmp_path: Path, etcd: EtcdStandIn, workload: Workload) -> dict[str, int]:
    settings = _settings(etcd.endpoint)
    load_keys("etcd", settings, workload, LoadOptions(progress=None))
    result = run_load(
        "etcd",
        settings,
        workload,
        DatabaseLayout(tmp_path / "db"),
        LoadOptions(max_error_rate=1.0, progress=None),
    )
    assert len(result.records) == workload.requests
    return result.records.counts()


def test_an_honest_server_gives_no_wrong_value(tmp_path: Path) -> None:
    workload = _mixed(read=0.4, update=0.2, insert=0.1, read_modify_write=0.3)
    with EtcdStandIn() as etcd:
        counts = _run(tmp_path, etcd, workload)
        assert set(counts) <= {"ok", "conflict"}, counts
        # Every value stored names its own key (the load phase's key 0 and an insert).
        for number in (0, 50):
            key = b"k" + str(number).zfill(15).encode()
            value = etcd.value(key)
            assert value is not None and int(value[:16], 16) == number


def test_wrong_values_are_caught_and_counted(tmp_path: Path) -> None:
    with EtcdStandIn(Misbehave(wrong_value=0.2)) as etcd:
        counts = _run(tmp_path, etcd, _mixed(read=1.0))
        lied = etcd.misdeeds["wrong_value"]
    assert counts.get("wrong-value") == lied
    # Not a timing: 600 reads, each lied to with p = 0.2 by the stand-in's
    # seeded generator (the reads' order, not their timing, decides which):
    # mean 120, sd 9.8, and the bounds are 6 sd out.
    assert 0.1 * 600 < lied < 0.3 * 600


def test_read_modify_writes_that_lose_their_race_are_conflicts(tmp_path: Path) -> None:
    # 20 clients over 2 keys: a read-modify-write's key is often written
    # between its read and its Txn.
    with EtcdStandIn() as etcd:
        counts = _run(tmp_path, etcd, _mixed(key_count=2, read_modify_write=1.0))
    assert set(counts) == {"ok", "conflict"}, counts
    assert counts["ok"] + counts["conflict"] == 600


def _watch(endpoint: str, puts: int) -> list[bytes]:
    """Watch the prefix "w", put ``puts`` keys, and return the keys of the
    events received, in order."""
    with grpc.insecure_channel(endpoint) as channel:
        kv, watch = rpc.KVStub(channel), rpc.WatchStub(channel)
        create = pb.WatchRequest(create_request=pb.WatchCreateRequest(key=b"w", range_end=b"x"))
        responses = watch.Watch(iter([create]), timeout=3)
        assert next(responses).created
        for i in range(puts):
            kv.Put(pb.PutRequest(key=b"w%03d" % i, value=b"v"))
        keys: list[bytes] = []
        try:
            for response in responses:
                keys += [e.kv.key for e in response.events]
                if len(keys) >= puts:
                    break
        except grpc.RpcError as exc:  # the deadline: fewer events than puts
            assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        return keys


def test_the_stand_ins_switches_do_what_they_say() -> None:
    keys = [b"w%03d" % i for i in range(20)]
    with EtcdStandIn() as etcd:
        assert _watch(etcd.endpoint, 20) == keys
    with EtcdStandIn(Misbehave(reorder_events=True)) as etcd:
        seen = _watch(etcd.endpoint, 20)
        assert sorted(seen) == keys
        assert (seen != keys) == (etcd.misdeeds.get("reorder_events", 0) > 0)
    with EtcdStandIn(Misbehave(drop_events=0.5)) as etcd:
        seen = _watch(etcd.endpoint, 20)
        assert len(seen) == 20 - etcd.misdeeds["drop_events"] < 20
        assert seen == sorted(seen)
    with EtcdStandIn(Misbehave(lose_writes=1.0, stale=True)) as etcd:
        with grpc.insecure_channel(etcd.endpoint) as channel:
            rpc.KVStub(channel).Put(pb.PutRequest(key=b"k", value=b"v"))
        assert etcd.value(b"k") is None
    with (
        EtcdStandIn(Misbehave(stale=True)) as etcd,
        grpc.insecure_channel(etcd.endpoint) as channel,
    ):
        kv = rpc.KVStub(channel)
        kv.Put(pb.PutRequest(key=b"k", value=b"one"))
        kv.Put(pb.PutRequest(key=b"k", value=b"two"))
        assert kv.Range(pb.RangeRequest(key=b"k")).kvs[0].value == b"one"
