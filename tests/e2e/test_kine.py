"""kine (etcd's API over SQLite) end to end, as a kind of its own: a mixed
load with read-modify-writes verified, and watchers that miss nothing. Writes checked for
linearizability while its one process is killed and restarted are in
test_check, beside the other kinds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cases import database, make_case, write_case
from tests.support.cluster import KINE, dbtester

pytestmark = pytest.mark.integration

LOAD = {"requests": 2000, "rate": 500, "clients": 20, "connections": 4}


def _run(tmp_path: Path, home: str, case: dict[str, Any]) -> Path:
    out = tmp_path / "results"
    result = dbtester(
        Path(home), "run", str(write_case(tmp_path / "case.yaml", case)), "--out", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _figures(out: Path) -> dict[str, dict[str, Any]]:
    return {
        db["id"]: db["figures"] for db in json.loads((out / "result.json").read_text())["databases"]
    }


def test_mixed_and_watch_on_kine(tmp_path: Path, installed_home: Any) -> None:
    home = installed_home("kine", KINE)
    mixed = {"type": "mixed", "key_count": 500, "read_proportion": 0.4}
    mixed |= {"update_proportion": 0.3, "insert_proportion": 0.2}
    mixed |= {"read_modify_write_proportion": 0.1}
    watchers = {"watchers": 10, "watch_connections": 2, "check": {"model": "watch"}}
    # each database overrides the case's workload; a type's own keys only where it runs
    case = make_case(
        title="e2e kine",
        workload={**LOAD, "type": "watch", "requests": 1000},
        databases=[
            database("mixed", "kine", version=KINE, workload={**mixed, "requests": 2000}),
            database("watch", "kine", version=KINE, workload=watchers),
        ],
    )
    figures = _figures(_run(tmp_path, home, case))
    # every insert found (the load phase's keys are counted apart)
    assert figures["mixed"]["KEYS-VERIFIED"].endswith(" OK"), figures["mixed"]
    assert figures["mixed"]["UPDATE-Latency p99"] != "-", figures["mixed"]
    # kine takes the read-modify-write's transaction (the apiserver's shape)
    assert figures["mixed"]["READ-MODIFY-WRITE-THROUGHPUT"] != "-", figures["mixed"]
    assert figures["watch"]["WATCH-EVENTS-MISSED"] == 0, figures["watch"]
    assert figures["watch"]["WATCH-EVENTS-RECEIVED"] == 10_000, figures["watch"]
