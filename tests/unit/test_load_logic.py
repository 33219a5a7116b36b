"""Pure logic of the load generator: keys, the engine's plan, records,
ZooKeeper's connection limit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dbtester.config import load_test_case_text
from dbtester.databases.base import LoadSettings
from dbtester.errors import ConfigError
from dbtester.load.native import plan, records_of
from dbtester.results import Records
from dbtester.util.keys import KeySpace
from dbtester.workloads import workload_of

SETTINGS = LoadSettings(
    ("127.0.0.1:1", "127.0.0.1:2"), {"balancer": "leader"}, 16, 8, "serializable", 3.0
)


def test_keys_are_distinct_fixed_size_and_permuted() -> None:
    seq = KeySpace(1000, 16)
    assert seq.key(0) == b"k000000000000000" and len(seq.key(999)) == 16
    rnd = KeySpace(1000, 16, sequential=False, seed=3)
    keys = {rnd.key(i) for i in range(1000)}
    assert len(keys) == 1000 and keys == {seq.key(i) for i in range(1000)}
    assert [rnd.key(i) for i in range(5)] != [seq.key(i) for i in range(5)]
    same = KeySpace(1000, 16, same_key=True)
    assert {same.key(i) for i in range(100)} == {same.key(0)}


def test_the_plan_carries_every_step_and_setting() -> None:
    w = workload_of(
        type="write",
        requests=1001,
        key_size=16,
        clients=100,
        connections=10,
        client_steps=(1, 10, 100),
        sequential_keys=False,
    )
    p = plan("etcd", SETTINGS, w, threads=2, seed=7, max_errors=10)
    assert p["protocol"] == "etcd" and p["options"] == {"balancer": "leader"}
    assert p["endpoints"] == ["127.0.0.1:1", "127.0.0.1:2"]
    assert p["mix"] == {"read": 0.0, "update": 0.0, "insert": 1.0, "read_modify_write": 0.0}
    keys = p["keys"]
    assert (keys["existing"], keys["first"], keys["inserts"], keys["insert_space"]) == (
        0,
        0,
        "permuted",
        1001,
    )
    assert p["values"] == "fixed"
    assert (p["threads"], p["seed"], p["max_errors"], p["timeout_s"]) == (2, 7, 10, 3.0)
    steps = [(s["clients"], s["connections"], s["requests"], s["rate"]) for s in p["steps"]]
    # requests shared evenly, the rest to the last step; connections never exceed clients
    assert steps == [(1, 1, 333, 0.0), (10, 10, 333, 0.0), (100, 10, 335, 0.0)]
    assert sum(s["requests"] for s in p["steps"]) == 1001


def test_a_read_plan_reads_the_one_seeded_key_at_the_rate() -> None:
    w = workload_of(type="read", requests=10, key_size=16, clients=4, connections=2, rate=100)
    p = plan("consul", replace(SETTINGS, client={}), w)
    assert p["protocol"] == "consul" and p["mix"]["read"] == 1.0
    assert (p["keys"]["existing"], p["keys"]["choose"]) == (1, "same")
    assert p["steps"] == [{"clients": 4, "connections": 2, "requests": 10, "rate": 100.0}]
    assert p["consistency"] == "serializable" and p["max_errors"] is None


def test_engine_results_become_records(tmp_path: Path) -> None:
    result = {
        "due_ns": np.array([30, 10], np.int64),
        "latency_ns": np.array([5, 6], np.int64),
        "service_ns": np.array([4, 6], np.int64),
        "code": np.array([1, 0], np.uint8),
        "step": np.array([0, 0], np.uint16),
        "op": np.array([2, 2], np.uint8),
        "codes": ["ok", "UNAVAILABLE"],
        "stopped": "",
    }
    records = records_of(result)
    assert records.counts() == {"ok": 1, "UNAVAILABLE": 1}
    records.save(tmp_path / "r.npz")
    again = Records.load(tmp_path / "r.npz")
    assert again.counts() == records.counts()
    assert np.array_equal(again.due_ns, records.due_ns)


@pytest.mark.parametrize("size", [0, 1])
def test_tiny_records_round_trip(tmp_path: Path, size: int) -> None:
    Records.empty(size).save(tmp_path / "r.npz")
    assert len(Records.load(tmp_path / "r.npz")) == size


def _zk_case(connections: int, flags: str = "") -> str:
    return f"""
title: t
workload: {{type: write, requests: 1000, clients: 500, connections: {connections}}}
databases:
  - id: zk
    kind: zookeeper
    version: 3.8.0{flags}
"""


def test_zookeeper_connection_limit_is_raised_to_fit_and_said() -> None:
    loaded = load_test_case_text(_zk_case(200))
    db = loaded.case.database("zk")
    assert db.flags.max_client_cnxns == 201  # type: ignore[attr-defined]
    (note,) = [w for w in loaded.warnings if "max_client_cnxns" in w.message]
    assert "200 connections" in note.message and "default of 60" in note.message
    # the resolved test case (config.yaml of a run) says it too
    assert loaded.case.to_raw()["databases"][0]["flags"] == {"max_client_cnxns": 201}


def test_zookeeper_under_the_default_limit_is_left_alone() -> None:
    loaded = load_test_case_text(_zk_case(50))
    assert loaded.case.database("zk").flags.max_client_cnxns is None  # type: ignore[attr-defined]
    assert not loaded.warnings


def test_zookeeper_limit_set_too_low_is_refused_at_its_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(_zk_case(200, "\n    flags: {max_client_cnxns: 100}"))
    message = str(caught.value)
    assert "<string>:8:" in message
    assert "max_client_cnxns (100) is fewer than the 200 connections" in message
    assert "at least 201, or set 0" in message
    unlimited = load_test_case_text(_zk_case(200, "\n    flags: {max_client_cnxns: 0}"))
    assert unlimited.case.database("zk").flags.max_client_cnxns == 0  # type: ignore[attr-defined]
