"""The original dbtester's test cases: recognised, converted, warned about."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbtester.config import load_test_case
from tests.conftest import REFERENCE

OLD = sorted(REFERENCE.glob("*.yaml"))


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.name)
def test_reference_configs_validate(run_cli, path: Path) -> None:
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
    loaded = load_test_case(REFERENCE / "write-1M-keys-best-throughput.yaml")
    etcd = loaded.case.database("etcd-v3.3")
    assert etcd.flags.snapshot_count == 100000  # type: ignore[attr-defined]
    notes = [w for w in loaded.warnings if "snap_count" in w.message]
    assert notes and "silently ignored" in notes[0].message
    # located at the key in the old file
    line = (
        (REFERENCE / "write-1M-keys-best-throughput.yaml")
        .read_text()
        .splitlines()[notes[0].line - 1]
    )
    assert "snap_count" in line


def test_per_database_options_become_overrides() -> None:
    case = load_test_case(REFERENCE / "write-1M-keys-best-throughput.yaml").case
    clients = {db.kind: (db.workload.clients, db.workload.connections) for db in case.databases}
    assert clients == {"etcd": (1000, 100), "zookeeper": (700, 700), "consul": (500, 500)}
    zk = case.database("zookeeper-r3.5.3.beta")
    assert zk.flags.heap_max == "50G" and zk.flags.max_client_cnxns == 5000  # type: ignore[attr-defined]
    assert [h.address for h in zk.hosts] == ["10.138.0.2", "10.138.0.3", "10.138.0.4"]
    assert case.publish is not None and case.publish.url.startswith("gs://dbtester-results/")


def test_client_steps_and_rates_and_stale_reads() -> None:
    steps = load_test_case(REFERENCE / "write-1M-keys-client-variable.yaml").case.workload
    assert steps.client_steps == (1, 10, 50, 100, 300, 500, 700, 1000)
    assert steps.step_plan()[0] == (1, 1, 125000)
    qps = load_test_case(REFERENCE / "write-1M-keys-1000QPS.yaml").case.workload
    assert qps.rate == 1000
    read = load_test_case(REFERENCE / "read-3M-same-keys-best-throughput.yaml").case.workload
    assert read.type == "read" and read.requests == 3_000_000


def test_versions_come_from_descriptions() -> None:
    case = load_test_case(REFERENCE / "2018Q2-01-write-1M-keys-best-throughput.yaml").case
    assert [db.version for db in case.databases] == [
        "3.2.20",
        "3.3.5",
        "3.4-67b1ff672",
        "3.4-balancer0511",
    ]


def _old_with(tmp_path: Path, find: str, replace: str) -> Path:
    text = (REFERENCE / "write-100K-keys-1-client.yaml").read_text()
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
    path = _old_with(tmp_path, "request_number: 100000", "request_number: 0")
    result = run_cli("validate", str(path))
    assert result.code == 2 and "requests" in result.err
    line = int(result.err.split(f"{path}:")[1].split(":")[0])
    assert "request_number: 0" in path.read_text().splitlines()[line - 1]


def test_convert_refuses_to_overwrite(tmp_path: Path, run_cli) -> None:
    new = tmp_path / "new.yaml"
    new.write_text("keep me")
    result = run_cli("convert", str(OLD[0]), str(new))
    assert result.code == 1 and "--force" in result.err
    assert new.read_text() == "keep me"
