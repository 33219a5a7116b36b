"""The results directory: old ones re-render, newer ones are refused, broken
files are named, and records survive a round trip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dbtester.errors import EXIT_BAD_INPUT, ResultsError, SchemaVersionError
from dbtester.results import (
    SCHEMA_VERSION,
    DatabaseRecord,
    Environment,
    LoadWindow,
    Machines,
    MemberRecord,
    Records,
    ResultsDir,
    RunSummary,
    account,
    upgrade,
)
from tests.conftest import ROOT

# A real quickstart run (3,000 writes per etcd version) written by dbtester 0.1,
# schema version 1, before the results directory had an owner: raw data plus the
# table that version rendered from it. Logs and charts left out.
V1 = ROOT / "tests" / "fixtures" / "results-v1"


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    return Path(shutil.copytree(V1, tmp_path / "run"))


def test_a_version_1_directory_re_renders_the_same_table(run_cli, v1: Path) -> None:
    expected = (V1 / "summary.txt").read_text()
    result = run_cli("analyze", str(v1))
    assert result.code == 0, result.err
    # the table as it was; then, since schema 3, the comparison of the two
    comparison = (v1 / "comparison.txt").read_text()
    assert result.out == expected + "\n" + comparison
    assert comparison.startswith("Compared with etcd v3.5.17: differences cannot be judged")
    assert (v1 / "summary.txt").read_bytes() == (V1 / "summary.txt").read_bytes()
    assert (v1 / "summary.csv").read_bytes() == (V1 / "summary.csv").read_bytes()
    # the 19 standard charts and the latency heatmap
    assert len(list((v1 / "charts").glob("*.svg"))) == 20
    # The summary is rewritten in the current schema, everything it had kept.
    summary = json.loads((v1 / "result.json").read_text())
    old = json.loads((V1 / "result.json").read_text())
    assert summary["schema_version"] == SCHEMA_VERSION
    assert summary["run_id"] == old["run_id"]
    assert summary["environment"] == old["environment"]
    assert [d["figures"] for d in summary["databases"]] == [d["figures"] for d in old["databases"]]
    # ... and read again by this version, the same table comes out.
    again = run_cli("analyze", str(v1))
    assert again.out == expected + "\n" + comparison


def test_version_1_records_upgrade() -> None:
    store = ResultsDir(V1)
    record = store.read_record("etcd-v3.5")
    assert record is not None
    assert (record.id, record.kind, record.version) == ("etcd-v3.5", "etcd", "3.5.17")
    assert record.verification is not None and record.verification.ok
    assert record.load is not None and record.load.counts == {"ok": 3000}
    assert [m.index for m in record.members] == [0, 1, 2]
    summary = store.read_summary()
    assert summary is not None and summary.environment.cores == 2


@pytest.mark.parametrize("name", ["result.json", "etcd-v3.5/run.json"])
def test_a_newer_schema_is_refused_with_exit_2(run_cli, v1: Path, name: str) -> None:
    path = v1 / name
    data = json.loads(path.read_text())
    data.pop("schema", None)
    data["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    result = run_cli("analyze", str(v1))
    assert result.code == EXIT_BAD_INPUT
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert str(path) in lines[0]
    assert f"schema version {SCHEMA_VERSION + 1}" in lines[0]
    assert f"up to {SCHEMA_VERSION}" in lines[0]
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("etcd-v3.5/run.json", "{not json", "not valid JSON"),
        ("etcd-v3.5/run.json", '{"schema_version": 2, "run_id": 5}', "run_id"),
        ("etcd-v3.5/run.json", "[1, 2]", "expected a JSON object"),
        ("etcd-v3.5/run.json", '{"run_id": "x"}', "no schema_version"),
        ("result.json", '{"schema_version": 0}', "not a version"),
        ("etcd-v3.5/client-latency.npz", "not a zip", "cannot read the records"),
        ("etcd-v3.5/server-0-metrics.csv", "a,b\n1,2\n", "missing columns"),
        ("config.yaml", "title: [unclosed", "not valid YAML"),
    ],
)
def test_a_corrupt_file_is_named(run_cli, v1: Path, name: str, content: str, reason: str) -> None:
    (v1 / name).write_text(content)
    result = run_cli("analyze", str(v1))
    assert result.code == EXIT_BAD_INPUT, result.err
    assert str(v1 / name) in result.err
    assert reason in result.err
    assert "Traceback" not in result.err


def test_a_missing_file_is_named(run_cli, v1: Path) -> None:
    (v1 / "config.yaml").unlink()
    result = run_cli("analyze", str(v1))
    assert result.code == EXIT_BAD_INPUT
    assert f"{v1}: not a dbtester results directory (no config.yaml)" in result.err


def test_records_with_a_wrong_type_are_named(tmp_path: Path) -> None:
    path = tmp_path / "client-latency.npz"
    n = 3
    np.savez(
        path,
        due_ns=np.zeros(n, np.float64),
        latency_ns=np.zeros(n, np.int64),
        service_ns=np.zeros(n, np.int64),
        code=np.zeros(n, np.uint8),
        step=np.zeros(n, np.uint16),
        codes=np.array(["ok"]),
    )
    with pytest.raises(ResultsError, match="due_ns is float64, expected int64"):
        Records.load(path)


def test_upgrade_refuses_newer_and_walks_older() -> None:
    path = Path("x/run.json")
    with pytest.raises(SchemaVersionError) as caught:
        upgrade({"schema_version": SCHEMA_VERSION + 3}, path)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert upgrade({"schema": 1, "a": 1}, path) == {"schema_version": SCHEMA_VERSION, "a": 1}


def test_records_round_trip(tmp_path: Path) -> None:
    store = ResultsDir(tmp_path)
    record = DatabaseRecord(
        run_id="r",
        database={"id": "db", "kind": "etcd", "version": "3.6.8"},
        started_unix=1.5,
        endpoints=("127.0.0.1:2379",),
        members=(MemberRecord(index=0, host="127.0.0.1", agent="127.0.0.1:1", pid=7),),
        verification=account({"ok": 9, "UNAVAILABLE": 1}, 10, same_key=False),
        load=LoadWindow(started_unix=2.0, ended_unix=3.0, workers=1, cpu_seconds=0.5),
    )
    store.write_record(record)
    assert store.read_record("db") == record
    assert json.loads(store.database("db").record.read_text())["schema_version"] == SCHEMA_VERSION
    with pytest.raises(ValueError, match="frozen"):
        record.error = "changed"  # type: ignore[misc]


def test_summary_round_trip(tmp_path: Path) -> None:
    store = ResultsDir(tmp_path)
    summary = ResultsDir(V1).read_summary()
    assert isinstance(summary, RunSummary)
    store.write_summary(summary)
    assert store.read_summary() == summary


@pytest.mark.parametrize(
    ("counts", "found", "same_key", "expected"),
    [
        # 100 writes: 90 acknowledged, 4 refused, 6 of unknown outcome: 90..96 keys
        ({"ok": 90, "FAILED_PRECONDITION": 4, "UNAVAILABLE": 6}, 93, False, (90, 96, 0, 0)),
        ({"ok": 90, "FAILED_PRECONDITION": 4, "UNAVAILABLE": 6}, 88, False, (90, 96, 2, 0)),
        ({"ok": 90, "FAILED_PRECONDITION": 4, "UNAVAILABLE": 6}, 97, False, (90, 96, 0, 1)),
        ({"ok": 5}, 1, True, (1, 1, 0, 0)),  # one key, overwritten
        ({"timeout": 5}, 0, True, (0, 1, 0, 0)),  # never acknowledged: may or may not exist
        ({"ok": 5}, 0, True, (1, 1, 1, 0)),
    ],
)
def test_account(
    counts: dict[str, int], found: int, same_key: bool, expected: tuple[int, int, int, int]
) -> None:
    v = account(counts, found, same_key=same_key)
    assert (v.expected_min, v.expected_max, v.lost, v.unexpected) == expected
    assert v.attempted == sum(counts.values())
    assert v.acknowledged + v.failed + v.unknown == v.attempted
    assert v.ok is (expected[2] == expected[3] == 0)


def test_machines_name_what_differs_and_ignore_the_unknown() -> None:
    amd = Environment(hostname="a", cpu_model="AMD EPYC 7B13", cores=8, kernel="Linux 6.1")
    intel = Environment(hostname="b", cpu_model="Intel Xeon", cores=8, kernel="Linux 6.1")
    same = Machines(client=amd, servers=(amd,))
    # the host name is not hardware
    assert (
        same.differences(Machines(client=amd, servers=(amd.model_copy(update={"hostname": "c"}),)))
        == []
    )
    assert same.differences(Machines(client=amd, servers=(intel,))) == [
        "servers cpu_model 'AMD EPYC 7B13' against 'Intel Xeon'"
    ]
    assert same.differences(Machines(client=intel, servers=(amd,))) == [
        "client cpu_model 'AMD EPYC 7B13' against 'Intel Xeon'"
    ]
    mixed = same.differences(Machines(client=amd, servers=(amd, intel)))
    assert len(mixed) == 1 and "Intel Xeon" in mixed[0] and "against" in mixed[0]
    # unknown on either side (runs from before schema 8): nothing to say
    assert same.differences(Machines(client=None, servers=())) == []
    assert Machines().differences(same) == []


def test_a_companion_servers_samples_are_its_own_rows(run_cli, v1: Path) -> None:
    """server-<i>-<name>-metrics.csv (schema 14) is read as a companion
    server's (kine's PostgreSQL), not as another member."""
    members = (v1 / "etcd-v3.6" / "server-0-metrics.csv").read_text()
    (v1 / "etcd-v3.6" / "server-0-postgres-metrics.csv").write_text(members)
    result = run_cli("analyze", str(v1))
    assert result.code == 0, result.err
    rows = {line.split("|")[1].strip(): line for line in result.out.splitlines() if "|" in line}
    assert rows["SERVER-MAX-CPU-USAGE"] in (V1 / "summary.txt").read_text()  # unchanged
    row = [cell.strip() for cell in rows["SERVER-POSTGRES-MAX-CPU-USAGE"].split("|")[2:4]]
    assert row[0] == "-" and row[1].endswith(" %"), row  # only the database that had one


def test_a_version_13_zookeeper_record_names_its_missing_key_outcome() -> None:
    """Before schema 14 the analysis knew ZooKeeper's NoNode by the kind;
    the upgrade writes it into the record, and no other kind gets one."""
    path = Path("run.json")
    zookeeper = upgrade({"schema_version": 13, "database": {"kind": "zookeeper"}}, path)
    assert zookeeper["not_found_outcome"] == "NoNode"
    etcd = upgrade({"schema_version": 13, "database": {"kind": "etcd"}}, path)
    assert "not_found_outcome" not in etcd and etcd["schema_version"] == SCHEMA_VERSION
