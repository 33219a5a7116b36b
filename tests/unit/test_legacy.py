"""Test cases in the original dbtester's format (our own, under
tests/fixtures/legacy): recognised, converted, warned about."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbtester.config import load_test_case
from tests.conftest import LEGACY

OLD = sorted(LEGACY.glob("*.yaml"))


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.name)
def test_legacy_configs_validate(run_cli, path: Path) -> None:
    result = run_cli("validate", str(path))
    assert result.code == 0, result.err
    assert "original dbtester format" in result.out


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.name)
def test_convert_round_trip(run_cli, tmp_path: Path, path: Path) -> None:
    new = tmp_path / "new.yaml"
    result = run_cli("convert", str(path), str(new))
    assert result.code == 0, result.err
    converted = load_test_case(new)
    assert not converted.legacy and not converted.warnings
    assert converted.case == load_test_case(path).case


def test_snap_count_is_a_visible_warning_not_a_silent_drop() -> None:
    loaded = load_test_case(LEGACY / "write-mixed-best-throughput.yaml")
    etcd = loaded.case.database("etcd-v3.5")
    assert etcd.flags.snapshot_count == 25000  # type: ignore[attr-defined]
    notes = [w for w in loaded.warnings if "snap_count" in w.message]
    assert notes and "silently ignored" in notes[0].message
    # located at the key in the old file
    line = (LEGACY / "write-mixed-best-throughput.yaml").read_text().splitlines()[notes[0].line - 1]
    assert "snap_count" in line


def test_per_database_options_become_overrides() -> None:
    case = load_test_case(LEGACY / "write-mixed-best-throughput.yaml").case
    clients = {db.kind: (db.workload.clients, db.workload.connections) for db in case.databases}
    assert clients == {"etcd": (400, 40), "zookeeper": (300, 300), "consul": (200, 200)}
    zk = case.database("zookeeper-r3.8.4")
    assert zk.flags.heap_max == "6G" and zk.flags.max_client_cnxns == 2000  # type: ignore[attr-defined]
    assert [h.address for h in zk.hosts] == ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
    assert case.publish is not None and case.publish.url.startswith("gs://dbtester-fixtures/")


def test_client_steps_and_rates_and_stale_reads() -> None:
    steps = load_test_case(LEGACY / "write-client-steps.yaml").case.workload
    assert steps.client_steps == (1, 8, 32, 128)
    assert steps.step_plan()[0] == (1, 1, 10000)
    qps = load_test_case(LEGACY / "write-rate-limited.yaml").case.workload
    assert qps.rate == 250
    read = load_test_case(LEGACY / "read-same-key-best-throughput.yaml").case.workload
    assert read.type == "read" and read.requests == 90_000


def test_versions_come_from_descriptions() -> None:
    case = load_test_case(LEGACY / "2018Q2-write-etcd-builds.yaml").case
    assert [db.version for db in case.databases] == [
        "3.4.35",
        "3.5.17",
        "3.6-f00dcafe1",
        "3.6-balancer0101",
    ]


def test_corners_the_published_cases_never_reach() -> None:
    loaded = load_test_case(LEGACY / "odd-corners.yaml")
    case = loaded.case
    etcd = case.database("etcd-v3.5")
    assert etcd.version == "3.5"  # from the id: the description names none
    assert {h.agent_port for h in etcd.hosts} == {3600}
    assert case.database("consul-v1.15.4").embedded  # no peer_ips
    assert case.workload.read_consistency == "serializable"  # stale_read: true
    assert case.publish is None  # no bucket
    lines = (LEGACY / "odd-corners.yaml").read_text().splitlines()
    located_at = {
        "no version in the description": "etcd__v3_5:",
        "standard client port 2379": "database_port_to_connect",
        "steps cannot be skipped": "benchmark_steps",
        "'election_timeout_ms' is not an etcd flag": "election_timeout_ms",
        "'autopurge_snap_retain_count' is not a ZooKeeper setting": "autopurge_snap",
        "'raft_multiplier' has no equivalent for consul": "raft_multiplier",
    }
    for phrase, key in located_at.items():
        found = [w for w in loaded.warnings if phrase in w.message]
        assert found, phrase
        assert key in lines[found[0].line - 1], phrase


def test_snapshot_count_the_original_did_read_is_kept(tmp_path: Path) -> None:
    path = _old_with(tmp_path, "snap_count:", "snapshot_count:")
    loaded = load_test_case(path)
    etcd = next(db for db in loaded.case.databases if db.kind == "etcd")
    assert etcd.flags.snapshot_count is not None  # type: ignore[attr-defined]
    assert not [w for w in loaded.warnings if "snapshot_count" in w.message]


def _old_with(tmp_path: Path, find: str, replace: str) -> Path:
    text = (LEGACY / "write-one-client.yaml").read_text()
    assert find in text
    path = tmp_path / "old.yaml"
    path.write_text(text.replace(find, replace, 1))
    return path


def test_unknown_old_key_names_line_and_suggests(tmp_path: Path, run_cli) -> None:
    path = _old_with(tmp_path, "request_number:", "request_numbr:")
    result = run_cli("validate", str(path))
    assert result.code == 2
    assert (
        "unknown key 'request_numbr'" in result.err
        and "did you mean 'request_number'" in result.err
    )
    line = int(result.err.split(f"{path}:")[1].split(":")[0])
    assert "request_numbr" in path.read_text().splitlines()[line - 1]


def test_bad_old_value_points_at_the_old_line(tmp_path: Path, run_cli) -> None:
    path = _old_with(tmp_path, "request_number: 5000", "request_number: 0")
    result = run_cli("validate", str(path))
    assert result.code == 2 and "requests" in result.err
    line = int(result.err.split(f"{path}:")[1].split(":")[0])
    assert "request_number: 0" in path.read_text().splitlines()[line - 1]


def test_convert_refuses_to_overwrite(tmp_path: Path, run_cli) -> None:
    new = tmp_path / "new.yaml"
    new.write_text("keep me")
    result = run_cli("convert", str(OLD[0]), str(new))
    assert result.code == 2 and "--force" in result.err  # bad input
    assert new.read_text() == "keep me"
