"""`dbtester run` end to end on the embedded default: real agents, real
clusters, real load, the table, 19 charts (and the host-speed one, the
latency heatmap and etcd's database size) and a README."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from dbtester.analyze.figures import DB_SIZE_ROWS, DB_SIZE_SERIES, ROWS
from dbtester.report.charts import HEATMAP
from dbtester.report.charts import STANDARD as CHARTS
from dbtester.results import SCHEMA_VERSION
from dbtester.util.host import host_facts
from tests.integration.agents import alive
from tests.support.cases import database, fast_elections, make_case
from tests.support.cluster import VERSIONS, dbtester

pytestmark = pytest.mark.integration

ETCD_VERSIONS = ("3.5.17", "3.6.8")
#: each workload's databases: writes on every kind; reads on the two etcd
#: versions only. What a read run does apart from a write run (the seed, the
#: readiness check, the table's and charts' rows without KEYS-VERIFIED) is
#: the same code for every kind; ZooKeeper's and Consul's own reads are
#: test_readable's (seeded, waited for and read on 3 members) and
#: test_mixed's (linearizable, through `dbtester run`). Two clusters there
#: rather than four: about 30 s less.
DATABASES = {
    "write": (*(f"etcd-{v}" for v in ETCD_VERSIONS), "zk", "consul"),
    "read": tuple(f"etcd-{v}" for v in ETCD_VERSIONS),
}


def _case(kind: str, requests: int) -> dict[str, object]:
    every = [
        *(database(f"etcd-{v}", version=v, members=3) for v in ETCD_VERSIONS),
        database("zk", "zookeeper", members=3),
        database("consul", "consul", members=3, **fast_elections("consul")),
    ]
    return make_case(
        title=f"e2e {kind}",
        description="end-to-end test",
        workload={"type": kind, "requests": requests},
        databases=[db for db in every if db["id"] in DATABASES[kind]],
    )


@pytest.fixture(scope="module")
def home(installed_home) -> Path:
    for version in ETCD_VERSIONS:
        installed_home("etcd", version)
    installed_home("zookeeper", VERSIONS["zookeeper"])
    return Path(installed_home("consul", VERSIONS["consul"]))


def _check_members(out: Path, result_json: dict[str, Any], databases: tuple[str, ...]) -> None:
    """Nothing left running, and each member's host and files recorded."""
    # nothing left running: every member's PID is gone
    host = host_facts()
    for db in databases:
        run = json.loads((out / db / "run.json").read_text())
        assert len(run["members"]) == 3
        for member in run["members"]:
            assert member["pid"] and not alive(member["pid"])
            assert member["disk_usage_bytes"] > 0
            # the agents describe their hosts and the files each member ran
            assert member["machine"]["cpu_model"] == host.cpu_model
            assert member["machine"]["cores"] == host.cores
            assert re.fullmatch(r"[0-9a-f]{64}", member["binary_sha256"])
        # one machine and one build per database: each named once in result.json
        (summarized,) = [d for d in result_json["databases"] if d["id"] == db]
        assert [s["cpu_model"] for s in summarized["servers"]] == [host.cpu_model]
        assert summarized["binaries"] == [run["members"][0]["binary_sha256"]]
        assert (out / db / "server-0-metrics.csv").exists()


def _check_database_size(db: dict[str, Any]) -> None:
    """etcd's members say their database's size (read from their /metrics);
    the other kinds say none."""
    size, in_use = (db["figures"].get(r) for r in DB_SIZE_ROWS)
    if db["id"].startswith("etcd"):
        assert size is not None and in_use is not None and 0 < in_use <= size, db["id"]
    else:
        assert size is None and in_use is None, db["id"]


@pytest.mark.parametrize(("workload", "requests"), [("write", 3000), ("read", 3000)])
def test_run_end_to_end(tmp_path: Path, home: Path, workload: str, requests: int) -> None:
    config = tmp_path / "case.yaml"
    databases = DATABASES[workload]
    config.write_text(yaml.safe_dump(_case(workload, requests)))
    out = tmp_path / "results"
    result = dbtester(home, "run", str(config), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    table = (out / "summary.txt").read_text()
    comparison = (out / "comparison.txt").read_text()
    assert result.stdout == table + "\n" + comparison
    assert "differences cannot be judged from one trial each" in comparison

    # every row, a value in every column
    lines = {
        line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("|")
    }
    for row in (*ROWS, "HOST-SPEED"):  # the probe runs on every host
        if row == "KEYS-VERIFIED" and workload == "read":
            continue
        cells = [c.strip() for c in lines[row].split("|")[2:-1]]
        assert len(cells) == len(databases) and all(c and c != "-" for c in cells), (row, cells)
    counts = [c.strip() for c in lines["TOTAL-REQUEST-NUMBER"].split("|")[2:-1]]
    assert counts == [f"{requests:,}"] * len(databases)
    result_json = json.loads((out / "result.json").read_text())
    assert result_json["schema_version"] == SCHEMA_VERSION
    assert [db["id"] for db in result_json["databases"]] == list(databases)
    for db in result_json["databases"]:
        assert db["passed"], db
        assert db["figures"]["SERVER-MAX-CPU-USAGE"] > 0
        assert db["figures"]["SERVER-MAX-MEMORY-USAGE"] > 0
        assert db["figures"]["TOTAL-REQUEST-NUMBER"] == requests
        if workload == "write":
            assert db["verification"]["found"] == requests
        _check_database_size(db)

    # the 19 standard charts, the host-speed probe's, the latency heatmap
    # and etcd's database size's two, each a real SVG
    charts = sorted((out / "charts").glob("*.svg"))
    extra = {"HOST-SPEED", HEATMAP.name, *DB_SIZE_SERIES}
    assert {c.stem for c in charts} == {c.name for c in CHARTS} | extra
    assert len(charts) == 23
    assert len(CHARTS) == 19
    for chart in charts:
        assert ET.parse(chart).getroot().tag.endswith("svg")

    # README links resolve: the report and the 23 charts
    readme = (out / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert len(links) == 24 and links[0] == "report.html"
    assert all((out / link).exists() for link in links)

    _check_members(out, result_json, databases)

    # analyze reproduces the table from the raw data alone
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for rendered in ("summary.txt", "summary.csv", "README.md"):
        (copy / rendered).unlink()
    shutil.rmtree(copy / "charts")
    again = dbtester(home, "analyze", str(copy))
    assert again.returncode == 0, again.stderr
    assert (copy / "summary.txt").read_text() == table
    assert len(list((copy / "charts").glob("*.svg"))) == len(charts)
