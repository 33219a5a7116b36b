"""`dbtester run` when things go wrong: a dead agent, Ctrl-C, an external cluster."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from dbtester.control.cluster import HEARTBEAT_S, MISSED_BEATS
from tests.integration.agents import agents, alive, loopback_peers
from tests.support.cluster import finish, start_run, wait_for_text, wait_serving
from tests.support.phases import ETCD, agent_of, write_case

pytestmark = pytest.mark.integration


def test_a_killed_agent_fails_its_database_and_the_run_goes_on(
    tmp_path: Path, installed_home
) -> None:
    home = installed_home("etcd", ETCD)
    config = write_case(tmp_path / "case.yaml", ["doomed", "healthy"], 60000, after=5000)
    log = tmp_path / "run.log"
    run = start_run(home, config, tmp_path / "out", log)
    try:
        wait_for_text(log, "doomed: write load")
        time.sleep(1.0)  # the stimulus: the agent dies 1 s into the load
        agent = agent_of(run, "doomed")
        killed_at = time.time()
        agent.send_signal(signal.SIGKILL)
        code = finish(run)
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
    assert healthy["error"] == "" and healthy["verification"]["found"] == 5000
    assert "1 of 2 databases failed" in text
    assert (tmp_path / "out" / "summary.txt").exists()  # the partial table is rendered


def test_ctrl_c_stops_everything_and_keeps_partial_results(tmp_path: Path, installed_home) -> None:
    home = installed_home("etcd", ETCD)
    config = write_case(tmp_path / "case.yaml", ["first", "second"], 200000)
    log = tmp_path / "run.log"
    run = start_run(home, config, tmp_path / "out", log)
    try:
        wait_for_text(log, "first: write load")
        time.sleep(2.0)  # the stimulus: Ctrl-C comes 2 s into the load
        member_pids = [
            p.pid for p in psutil.Process(run.pid).children(recursive=True) if p.name() == "etcd"
        ]
        os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        code = finish(run, timeout=120)
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
        wait_serving("etcd", peers)
        config = write_case(
            tmp_path / "case.yaml", ["existing"], 2000, endpoints=[peers[0].address("client")]
        )
        result = run_cli(
            "run", "--no-charts", str(config), "--out", str(tmp_path / "out"), "--workers", "1"
        )
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
    config = write_case(tmp_path / "case.yaml", ["a"], 10)
    result = run_cli("run", "--no-charts", str(config), "--only", "b")
    assert result.code == 2
    assert "unknown database id(s) b" in result.err and "has: a" in result.err
