"""`type: mixed` end to end: YCSB's workloads A (50% read, 50% update) and F
(50% read, 50% read-modify-write) at small size on real etcd, ZooKeeper and
Consul, through `dbtester run` with its load phase, the readiness check,
per-operation rows and every read's value checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dbtester.results import OPERATIONS, Records
from tests.support.cases import FAST_CONSUL
from tests.support.cluster import VERSIONS, dbtester

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
KEYS, REQUESTS = 300, 3000


@pytest.fixture(scope="module")
def home(installed_home) -> Path:
    installed_home("etcd", VERSIONS["etcd"])
    installed_home("zookeeper", VERSIONS["zookeeper"])
    return Path(installed_home("consul", VERSIONS["consul"]))


def _small(config: str) -> dict[str, Any]:
    """configs/<config>.yaml at test size: one member each, fewer keys and
    requests, and Consul's election at production timing (its one member
    serves 7 s sooner)."""
    case: dict[str, Any] = yaml.safe_load((ROOT / "configs" / f"{config}.yaml").read_text())
    case["workload"].update(
        key_count=KEYS, requests=REQUESTS, key_size=64, value_size=128, clients=20, connections=4
    )
    for db in case["databases"]:
        db["version"] = VERSIONS[db["kind"]]
        db["members"] = 1
        if db["kind"] == "consul":
            db["flags"] = dict(FAST_CONSUL)
    return case


@pytest.mark.parametrize(
    ("config", "second"), [("ycsb-a", "update"), ("ycsb-f", "read-modify-write")]
)
def test_a_ycsb_workload_runs_on_every_kind(
    tmp_path: Path, home: Path, config: str, second: str
) -> None:
    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump(_small(config)))
    out = tmp_path / "results"
    result = dbtester(home, "run", str(case), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "result.json").read_text())
    assert [db["id"] for db in summary["databases"]] == [
        "etcd-v3.5",
        "zookeeper-v3.8",
        "consul-v1.22",
    ]
    for db in summary["databases"]:
        figures = db["figures"]
        assert db["passed"], db
        assert figures["TOTAL-REQUEST-NUMBER"] == REQUESTS
        assert figures["CLIENT-ERROR-COUNT"] == 0, db["id"]
        assert figures["READ-THROUGHPUT"] > 0
        assert figures[f"{second.upper()}-THROUGHPUT"] > 0
        assert figures[f"{second.upper()}-Latency p99"] > 0
        # Every request accounted for: answered, or (F) a lost race; no wrong value.
        records = Records.load(out / db["id"] / "client-latency.npz")
        counts = records.counts()
        assert set(counts) <= {"ok", "conflict"}, counts
        assert sum(counts.values()) == REQUESTS
        ops = [OPERATIONS[i] for i in records.ops]
        reads = ops.count("read")
        assert ops.count(second) == REQUESTS - reads
        assert abs(reads / REQUESTS - 0.5) < 0.05, reads
        run = json.loads((out / db["id"] / "run.json").read_text())
        # an ordering, one clock (the controller's): the load phase came first
        assert run["load_phase"]["started_unix"] < run["load"]["started_unix"]
        assert any("load phase wrote 300 keys" in note for note in run["notes"])
        # Neither A nor F inserts: the load phase's keys, every one, and no other.
        assert run["verification"]["found"] == run["verification"]["expected_min"] == KEYS
    table = (out / "summary.txt").read_text()
    assert "READ-Latency p99" in table and f"{second.upper()}-Latency p99" in table
    # Each operation's latency has a chart of its own, linked from the README.
    for op in ("read", second):
        chart = f"AVG-LATENCY-MS-{op.upper()}.svg"
        assert (out / "charts" / chart).exists()
        assert f"charts/{chart}" in (out / "README.md").read_text()
