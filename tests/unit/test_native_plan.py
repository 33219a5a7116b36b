"""The plans dbtester hands the engine for its unmeasured loads: the mixed
workload's load phase and the one-read readiness check, both built by
``native.single_operation`` (pure: no engine is started)."""

from __future__ import annotations

from dbtester.databases.base import LoadSettings
from dbtester.load import native
from dbtester.workloads import workload_of

SETTINGS = LoadSettings(("127.0.0.1:2379",), {}, 16, 64, "serializable", 5.0)
MIXED = workload_of(
    type="mixed",
    requests=500,
    key_count=300,
    key_size=16,
    value_size=64,
    clients=20,
    connections=4,
    read_proportion=0.5,
    update_proportion=0.5,
)


def test_the_load_phase_inserts_key_count_keys_from_zero() -> None:
    plan = native.load_phase("etcd", SETTINGS, MIXED)
    assert plan["mix"] == {"read": 0.0, "update": 0.0, "insert": 1.0, "read_modify_write": 0.0}
    keys = plan["keys"]
    assert (keys["existing"], keys["first"], keys["choose"]) == (0, 0, "same")
    assert keys["insert_space"] == 300
    assert sum(step["requests"] for step in plan["steps"]) == 300
    assert plan["values"] == "tagged"  # reads of the measured phase check them


def test_a_single_read_asks_for_one_key_only() -> None:
    one = MIXED.model_copy(update={"requests": 1, "clients": 1, "connections": 1})
    plan = native.single_operation("etcd", SETTINGS, one, "read", key=299)
    assert plan["mix"] == {"read": 1.0, "update": 0.0, "insert": 0.0, "read_modify_write": 0.0}
    keys = plan["keys"]
    assert (keys["existing"], keys["first"], keys["choose"], keys["insert_space"]) == (
        1,
        299,
        "same",
        0,
    )
    assert plan["steps"] == [{"clients": 1, "connections": 1, "requests": 1, "rate": 0.0}]


def test_the_measured_plan_keeps_the_workloads_mix() -> None:
    plan = native.plan("etcd", SETTINGS, MIXED)
    assert plan["mix"] == {"read": 0.5, "update": 0.5, "insert": 0.0, "read_modify_write": 0.0}
    assert plan["keys"]["existing"] == 300 and plan["keys"]["choose"] == "zipfian"
    write = workload_of(
        type="write",
        requests=10,
        key_size=16,
        value_size=64,
        clients=1,
        connections=1,
        same_key=True,
    )
    same = LoadSettings(("127.0.0.1:2379",), {}, 16, 64, "serializable", 5.0, same_key=True)
    assert native.plan("etcd", same, write)["mix"]["update"] == 1.0
