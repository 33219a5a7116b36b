"""`check:` through `dbtester run`, against etcd stand-ins given as endpoints
(load only): a violation fails the run (exit 1) naming what broke, and with
`on_violation: report` the run passes and its README and report.html write
the first violation out, its operations with their members."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.standins.etcd import EtcdStandIn, Misbehave
from tests.support.cases import database, make_case, write_case

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, run_cli, endpoint: str, workload: dict[str, object]):
    base: dict[str, object] = {"requests": 600, "rate": 300, "key_size": 16, "value_size": 32}
    case = make_case(
        title="check",
        workload=base | {"clients": 4, "connections": 2} | workload,
        databases=[database("a", endpoints=[endpoint])],
    )
    path = write_case(tmp_path / "case.yaml", case)
    out = tmp_path / "out"
    return run_cli("run", str(path), "--out", str(out)), out


def test_a_stale_read_fails_the_run(tmp_path: Path, run_cli) -> None:
    with EtcdStandIn(Misbehave(stale=True)) as etcd:
        check = {"clients": 4, "keys": 2}
        result, out = _run(tmp_path, run_cli, etcd.endpoint, {"type": "write", "check": check})
    assert result.code == 1, result.err[-2000:]
    assert "not linearizable: key c" in result.err
    correctness = json.loads((out / "a" / "run.json").read_text())["correctness"]
    assert correctness["violation"]["operations"], correctness


def test_report_only_writes_the_violation_out(tmp_path: Path, run_cli) -> None:
    with EtcdStandIn(Misbehave(stale=True)) as etcd:
        check = {"clients": 4, "keys": 2, "on_violation": "report"}
        result, out = _run(tmp_path, run_cli, etcd.endpoint, {"type": "write", "check": check})
    assert result.code == 0, result.err[-2000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CORRECTNESS"].startswith("VIOLATED (")
    for page in ("README.md", "report.html"):
        text = (out / page).read_text()
        assert "NOT LINEARIZABLE: key c" in text, page
        assert "(member 0) read" in text or "(member 0) write" in text, page


def test_a_dropped_watch_event_fails_the_run(tmp_path: Path, run_cli) -> None:
    with EtcdStandIn(Misbehave(drop_events=0.02)) as etcd:
        watch = {"type": "watch", "watchers": 4, "request_timeout_s": 1.0}
        result, out = _run(tmp_path, run_cli, etcd.endpoint, watch | {"check": {"model": "watch"}})
    assert result.code == 1, result.err[-2000:]
    assert "watch guarantees broken: watcher " in result.err
    assert "never received the event of put" in result.err
    correctness = json.loads((out / "a" / "run.json").read_text())["correctness"]
    assert correctness["model"] == "watch" and correctness["watch"]["missed"] > 0
