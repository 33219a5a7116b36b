"""`dbtester run` when things go wrong: a dead agent, Ctrl-C, an external cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import psutil
import pytest
import yaml

from dbtester.control.cluster import HEARTBEAT_S, MISSED_BEATS
from tests.integration.agents import agents, alive, loopback_peers
from tests.integration.test_agent_cluster import _wait_serving

pytestmark = pytest.mark.integration
ETCD = "3.5.17"


def _write_case(
    path: Path,
    ids: list[str],
    requests: int,
    workload: Mapping[str, object] | None = None,
    **extra: object,
) -> Path:
    """A write case of one-member etcd databases named ``ids``; ``workload``
    adds workload keys, ``extra`` database keys."""
    case = {
        "title": "faults",
        "workload": {
            "type": "write",
            "requests": requests,
            "key_size": 64,
            "value_size": 256,
            "clients": 20,
            "connections": 4,
            **(workload or {}),
        },
        "databases": [
            {"id": i, "kind": "etcd", "version": ETCD, "members": 1, **extra} for i in ids
        ],
    }
    path.write_text(yaml.safe_dump(case))
    return path


def _start_run(
    home: str, config: Path, out: Path, log: Path, **env_extra: str
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DBTESTER_HOME": home, **env_extra}
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", _AS_FROM_A_TERMINAL, "run", str(config), "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            start_new_session=True,
        )


# `python -m dbtester` as started from a terminal: a shell's background job
# (`nohup ... &`, as scripts run CI) starts with SIGINT ignored, and Python then
# never turns Ctrl-C into KeyboardInterrupt.
_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys;"
    " signal.signal(signal.SIGINT, signal.default_int_handler);"
    " sys.argv[0] = 'dbtester';"
    " runpy.run_module('dbtester', run_name='__main__')"
)


def _wait_for(log: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"never saw {text!r}:\n{log.read_text()[-2000:]}"
        time.sleep(0.1)


def _agent_of(run: subprocess.Popen[bytes], db_id: str) -> psutil.Process:
    for child in psutil.Process(run.pid).children(recursive=True):
        if f"/{db_id}/agent-0" in " ".join(child.cmdline()):
            return child
    raise AssertionError(f"no agent for {db_id}")


def _finish(run: subprocess.Popen[bytes], timeout: float = 300) -> int:
    try:
        return run.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        raise


def test_a_killed_agent_fails_its_database_and_the_run_goes_on(
    tmp_path: Path, installed_home
) -> None:
    home = installed_home("etcd", ETCD)
    config = _write_case(tmp_path / "case.yaml", ["doomed", "healthy"], 60000)
    log = tmp_path / "run.log"
    run = _start_run(home, config, tmp_path / "out", log)
    try:
        _wait_for(log, "doomed: write load")
        time.sleep(1.0)
        agent = _agent_of(run, "doomed")
        killed_at = time.time()
        agent.send_signal(signal.SIGKILL)
        code = _finish(run)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "Traceback" not in text
    doomed = json.loads((tmp_path / "out" / "doomed" / "run.json").read_text())
    assert "agent 127.0.0.1:" in doomed["error"] and "not answering" in doomed["error"]
    assert not alive(doomed["members"][0]["pid"]), "the database outlived its agent"
    detection = doomed["load"]["ended_unix"] - killed_at
    print(f"detection {detection:.2f} s; error: {doomed['error']}")
    assert detection <= MISSED_BEATS * HEARTBEAT_S + 1.0, detection
    healthy = json.loads((tmp_path / "out" / "healthy" / "run.json").read_text())
    assert healthy["error"] == "" and healthy["verification"]["found"] == 60000
    assert "1 of 2 databases failed" in text
    assert (tmp_path / "out" / "summary.txt").exists()  # the partial table is rendered


def test_ctrl_c_stops_everything_and_keeps_partial_results(tmp_path: Path, installed_home) -> None:
    home = installed_home("etcd", ETCD)
    config = _write_case(tmp_path / "case.yaml", ["first", "second"], 200000)
    log = tmp_path / "run.log"
    run = _start_run(home, config, tmp_path / "out", log)
    try:
        _wait_for(log, "first: write load")
        time.sleep(2.0)
        member_pids = [
            p.pid for p in psutil.Process(run.pid).children(recursive=True) if p.name() == "etcd"
        ]
        os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        code = _finish(run, timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 130, text[-3000:]
    assert "partial results kept" in text and "Traceback" not in text
    assert member_pids and not any(alive(pid) for pid in member_pids)
    first = json.loads((tmp_path / "out" / "first" / "run.json").read_text())
    assert "interrupted" in first["error"]
    assert (tmp_path / "out" / "first" / "server-0-metrics.csv").exists()
    assert not (tmp_path / "out" / "second").exists()  # never started


def test_endpoints_run_against_an_existing_cluster(tmp_path: Path, installed_home, run_cli) -> None:
    home = installed_home("etcd", ETCD)
    peers = loopback_peers("etcd", 1)
    with agents(tmp_path / "agents", 1, home=home) as running:
        client = running[0].client()
        client.start(
            run_id="ext",
            database_id="ext",
            kind="etcd",
            version=ETCD,
            member_index=0,
            peers=peers,
            flags={},
        )
        _wait_serving("etcd", peers)
        config = _write_case(
            tmp_path / "case.yaml", ["existing"], 2000, endpoints=[peers[0].address("client")]
        )
        result = run_cli("run", str(config), "--out", str(tmp_path / "out"), "--workers", "1")
    assert result.code == 0, result.err
    lines = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in result.out.splitlines()
        if line.startswith("|")
    }
    assert lines["TOTAL-REQUEST-NUMBER"] == "2,000"
    assert lines["KEYS-VERIFIED"] == "2,000 / 2,000 OK"
    assert lines["CLIENT-MAX-CPU-USAGE"].endswith("%")
    assert lines["SERVER-MAX-CPU-USAGE"] == "-"  # no agents: no server samples
    assert (tmp_path / "out" / "existing" / "client-latency.npz").exists()


def test_unknown_only_id_is_bad_input(tmp_path: Path, run_cli) -> None:
    config = _write_case(tmp_path / "case.yaml", ["a"], 10)
    result = run_cli("run", str(config), "--only", "b")
    assert result.code == 2
    assert "unknown database id(s) b" in result.err and "has: a" in result.err
