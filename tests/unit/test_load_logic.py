"""Pure logic of the load generator: keys, plans, records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dbtester.config.model import Workload
from dbtester.load.runner import plan_steps
from dbtester.load.worker import split
from dbtester.results import Records
from dbtester.util.keys import KeySpace, varint


def test_varint_matches_protobuf() -> None:
    from dbtester.proto import etcd_pb2

    for n in (0, 1, 127, 128, 256, 300, 16384, 2**31):
        encoded = etcd_pb2.PutRequest(key=b"x" * 0, lease=n).SerializeToString()
        assert encoded == (b"\x18" + varint(n) if n else b"")


def test_pre_encoded_put_equals_protobuf() -> None:
    from dbtester.databases.base import LoadSettings
    from dbtester.databases.etcd import EtcdLoadClient
    from dbtester.proto import etcd_pb2

    client = EtcdLoadClient(LoadSettings(("127.0.0.1:1",), {}, 256, 1024, "linearizable", 1.0))
    key = KeySpace(10, 256).key(7)
    ours = client._put_head + key + client._put_tail
    assert ours == etcd_pb2.PutRequest(key=key, value=b"v" * 1024).SerializeToString()


def test_keys_are_distinct_fixed_size_and_permuted() -> None:
    seq = KeySpace(1000, 16)
    assert seq.key(0) == b"k000000000000000" and len(seq.key(999)) == 16
    rnd = KeySpace(1000, 16, sequential=False, seed=3)
    keys = {rnd.key(i) for i in range(1000)}
    assert len(keys) == 1000 and keys == {seq.key(i) for i in range(1000)}
    assert [rnd.key(i) for i in range(5)] != [seq.key(i) for i in range(5)]
    same = KeySpace(1000, 16, same_key=True)
    assert {same.key(i) for i in range(100)} == {same.key(0)}


def test_split_and_plan_cover_every_request_once() -> None:
    assert split(10, 3) == [4, 3, 3] and sum(split(7, 7)) == 7
    w = Workload(
        type="write", requests=1001, clients=100, connections=10, client_steps=(1, 10, 100)
    )
    shares = plan_steps(w, 2)
    covered = sorted(i for worker in shares for step in worker for i in step.indexes)
    assert covered == list(range(1001))
    # a 1-client step runs on one worker only; connections never exceed clients
    assert [s.clients for s in (shares[0][0], shares[1][0])] == [1, 0]
    for worker in shares:
        for step in worker:
            assert step.connections <= max(step.clients, 1)


def test_open_loop_plan_interleaves_the_schedule() -> None:
    w = Workload(type="write", requests=10, clients=4, connections=2, rate=100)
    a, b = (shares[0] for shares in plan_steps(w, 2))
    assert (a.rate, b.rate) == (50, 50)
    assert (a.phase_s, b.phase_s) == (0.0, 0.01)  # together: one request every 10 ms
    assert list(a.indexes) == [0, 2, 4, 6, 8] and list(b.indexes) == [1, 3, 5, 7, 9]


def test_records_merge_sorts_and_unifies_codes(tmp_path: Path) -> None:
    a, b = Records.empty(2), Records.empty(2)
    a.due_ns[:] = [30, 10]
    b.due_ns[:] = [20, 40]
    a.code[:] = [a.code_of("UNAVAILABLE"), 0]
    b.code[:] = [b.code_of("timeout"), b.code_of("UNAVAILABLE")]
    merged = Records.merge([a, b])
    assert list(merged.due_ns) == [10, 20, 30, 40]
    assert [merged.codes[c] for c in merged.code] == ["ok", "timeout", "UNAVAILABLE", "UNAVAILABLE"]
    merged.save(tmp_path / "r.npz")
    again = Records.load(tmp_path / "r.npz")
    assert again.counts() == {"ok": 1, "timeout": 1, "UNAVAILABLE": 2}
    assert np.array_equal(again.due_ns, merged.due_ns)


@pytest.mark.parametrize("size", [0, 1])
def test_tiny_records(size: int) -> None:
    assert len(Records.merge([Records.empty(size)])) == size
