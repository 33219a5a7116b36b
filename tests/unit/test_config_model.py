"""The test-case model: defaults, overrides, step plans, conversion round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dbtester.config import load_test_case, load_test_case_text
from dbtester.databases.etcd import EtcdClient, EtcdFlags
from tests.conftest import CONFIGS, LEGACY

BASE = """\
title: t
workload: {type: write, requests: 1000, clients: 100, connections: 10}
databases:
  - {id: a, kind: etcd, version: 3.5.17, flags: {snapshot_count: 5}}
  - {id: z, kind: zookeeper, version: 3.8.0, workload: {clients: 7, connections: 7}}
"""


def test_defaults_and_typed_flags() -> None:
    case = load_test_case_text(BASE).case
    etcd, zk = case.databases
    assert isinstance(etcd.flags, EtcdFlags) and etcd.flags.snapshot_count == 5
    assert isinstance(etcd.client, EtcdClient) and etcd.client.balancer == "round_robin"
    assert etcd.members == 3 and etcd.embedded
    assert etcd.label == "a"
    assert case.workload.key_size == 256 and case.workload.value_size == 1024
    # the override changes only what it names
    assert (zk.workload.clients, zk.workload.connections, zk.workload.requests) == (7, 7, 1000)
    assert etcd.workload == case.workload


def test_models_are_frozen() -> None:
    case = load_test_case_text(BASE).case
    with pytest.raises(Exception, match="frozen"):
        case.workload.requests = 5  # type: ignore[misc]


def test_step_plan_shares_requests_and_caps_connections() -> None:
    text = BASE.replace(
        "clients: 100, connections: 10", "clients: 100, connections: 10, client_steps: [1, 5, 100]"
    )
    text = text.replace("workload: {clients: 7, connections: 7}", "workload: {rate: 5}")
    w = load_test_case_text(text).case.workload
    assert w.step_plan() == [(1, 1, 333), (5, 5, 333), (100, 10, 334)]
    assert sum(r for _, _, r in w.step_plan()) == w.requests


def test_read_only_keys_warn_for_reads() -> None:
    text = BASE.replace("type: write", "type: read, same_key: true")
    loaded = load_test_case_text(text, "r.yaml")
    assert any(
        "same_key" in w.message and "write workloads only" in w.message for w in loaded.warnings
    )


def test_hosts_set_member_count() -> None:
    text = BASE.replace(
        "flags: {snapshot_count: 5}", "hosts: [{address: 10.0.0.2}, {address: 10.0.0.3}]"
    )
    etcd = load_test_case_text(text).case.databases[0]
    assert etcd.member_count == 2 and not etcd.embedded
    assert etcd.hosts[0].agent_port == 3500


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    loaded = load_test_case(path)
    assert not loaded.warnings, loaded.warnings
    case = loaded.case
    comparisons = {
        (db.kind, db.version, db.flags, db.client, db.tls, db.workload) for db in case.databases
    }
    assert len(comparisons) >= 2, "each shipped config compares at least two settings"


def test_quickstart_is_small_and_compares_etcd_versions() -> None:
    case = load_test_case(CONFIGS / "quickstart.yaml").case
    versions = {db.version for db in case.databases if db.kind == "etcd"}
    assert len(versions) >= 2
    assert case.workload.requests <= 50_000
    assert all(db.embedded for db in case.databases)


def test_issue_configs_exist() -> None:
    names = {p.name for p in CONFIGS.glob("*.yaml")}
    assert {
        "write-1M.yaml",
        "read-3M-same-keys.yaml",
        "write-1M-client-scaling.yaml",
        "write-1M-1000QPS.yaml",
        "write-100K-1-client.yaml",
        "etcd-zookeeper-consul.yaml",
        "etcd-balancers.yaml",
        "quickstart.yaml",
    } <= names
    write1m = load_test_case(CONFIGS / "write-1M.yaml").case
    assert [db.version for db in write1m.databases] == ["3.4.23", "3.5.17", "3.6.8"]
    assert (write1m.workload.requests, write1m.workload.clients, write1m.workload.connections) == (
        1_000_000,
        1000,
        100,
    )
    balancers = load_test_case(CONFIGS / "etcd-balancers.yaml").case
    assert {getattr(db.client, "balancer") for db in balancers.databases} == {  # noqa: B009
        "pick_first",
        "round_robin",
        "leader",
    }


def test_to_raw_round_trips() -> None:
    case = load_test_case_text(BASE).case
    again = load_test_case_text(yaml.safe_dump(case.to_raw(), sort_keys=False)).case
    assert again == case


def test_legacy_fixtures_present() -> None:
    assert len(list(LEGACY.glob("*.yaml"))) == 11
