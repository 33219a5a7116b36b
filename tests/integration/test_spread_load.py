"""``load_hosts:`` through ``dbtester run``: two real agents on loopback share
the load against an etcd stand-in given as an endpoint. One agent's clock is
set 300 ms ahead (``DBTESTER_AGENT_CLOCK_SHIFT_S``; processes on one machine
share its clock): the offset the controller measures must take it out, so
both hosts start within 10 ms of the common start and the merged records are
every request, each exactly once, on the controller's clock."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from dbtester.control.agents import spawn_agent
from dbtester.results import Records
from tests.integration.agents import RunningAgent, stop_agent
from tests.integration.cores import busy_loops, pinned, split_cores
from tests.standins.etcd import EtcdStandIn

pytestmark = pytest.mark.integration

TOKEN = "spread-load-test-token"
SHIFT_S = 0.3


def _agent(root: Path, shift_s: float = 0.0) -> RunningAgent:
    root.mkdir(parents=True, exist_ok=True)
    token_file = root / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    env = {**os.environ, "DBTESTER_AGENT_CLOCK_SHIFT_S": str(shift_s)}
    local = spawn_agent(root, ["--token-file", str(token_file)], env)
    return RunningAgent(local.process, local.address, local.data_root, TOKEN, local.log)


@pytest.fixture
def two_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RunningAgent]]:
    monkeypatch.setenv("DBTESTER_AGENT_TOKEN", TOKEN)
    agents: list[RunningAgent] = []
    try:
        agents.append(_agent(tmp_path / "load-0"))
        agents.append(_agent(tmp_path / "load-1", SHIFT_S))
        yield agents
    finally:
        for agent in agents:
            stop_agent(agent)


def _case(path: Path, endpoint: str, agents: list[RunningAgent], **workload: object) -> None:
    hosts = []
    for agent in agents:
        address, port = agent.address.rsplit(":", 1)
        hosts.append({"address": address, "agent_port": int(port)})
    case = {
        "title": "spread",
        "workload": {
            "type": "write",
            "requests": 3001,
            "rate": 1000,
            "key_size": 16,
            "value_size": 32,
            "clients": 8,
            "connections": 4,
            **workload,
        },
        "databases": [{"id": "a", "kind": "etcd", "version": "3.5.17", "endpoints": [endpoint]}],
        "load_hosts": hosts,
    }
    path.write_text(yaml.safe_dump(case))


def test_two_load_hosts_share_the_load_and_merge_exactly(
    tmp_path: Path, run_cli, two_agents: list[RunningAgent]
) -> None:
    config, out = tmp_path / "case.yaml", tmp_path / "out"
    with EtcdStandIn() as etcd:
        _case(config, etcd.endpoint, two_agents)
        result = run_cli("run", str(config), "--out", str(out))
        assert result.code == 0, result.err[-3000:]
    record = json.loads((out / "a" / "run.json").read_text())
    hosts = record["load_hosts"]
    assert [h["requests"] for h in hosts] == [1501, 1500]
    assert [h["rate"] for h in hosts] == [500.0, 500.0]
    assert sum(sum(h["counts"].values()) for h in hosts) == 3001
    # the shifted clock is measured, and corrected: both started together
    assert abs(hosts[1]["clock_offset_s"] - SHIFT_S) < 0.02, hosts[1]
    assert abs(hosts[0]["clock_offset_s"]) < 0.02, hosts[0]
    for host in hosts:
        assert host["start_skew_ms"] is not None and abs(host["start_skew_ms"]) < 10, host
        assert host["cpu_seconds"] > 0 and host["throughput"] > 0
    records = Records.load(out / "a" / "client-latency.npz")
    assert len(records) == 3001 and records.counts() == {"ok": 3001}
    # one schedule: the hosts' due times interleave at 1 ms steps
    steps = np.diff(np.sort(records.due_ns)) / 1e6
    assert np.median(steps) == pytest.approx(1.0, abs=0.05)
    assert record["verification"]["acknowledged"] == 3001
    assert record["verification"]["found"] == 3001 and record["verification"]["lost"] == 0
    # the hosts' samples, moved onto our clock, start together too (the
    # shifted host's would start 300 ms early if either move were missing)
    firsts = [_first_sample_ms(out / "a" / f"client-{i}-metrics.csv") for i in range(2)]
    assert abs(firsts[1] - firsts[0]) < 150, firsts
    assert not (out / "a" / "load-hosts").exists()
    # merged exactly: the table's percentiles are numpy's over both hosts' own
    own = [Records.load(out / "a" / f"client-{i}-latency.npz") for i in range(2)]
    assert [len(r) for r in own] == [1501, 1500]
    both = np.concatenate([r.latency_ns for r in own]) / 1e6
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CLIENT-MAX-CPU-USAGE"] > 0 and figures["CLIENT-MAX-MEMORY-USAGE"] > 0
    for p in (50, 99):
        assert figures[f"Latency p{p}"] == pytest.approx(float(np.percentile(both, p)), rel=1e-12)
    readme = (out / "README.md").read_text()
    assert "Load from 2 hosts" in readme and "worst start skew" in readme


def _first_sample_ms(path: Path) -> int:
    """The unix_ms of a samples CSV's first row."""
    with path.open(newline="") as handle:
        return int(next(csv.DictReader(handle))["unix_ms"])


@pytest.mark.parametrize(
    ("how", "says"),
    [(signal.SIGKILL, "UNAVAILABLE"), (signal.SIGSTOP, "stopped answering for")],
    ids=["killed", "silent"],
)
def test_a_load_host_that_dies_fails_the_run_naming_it(
    tmp_path: Path, run_cli, two_agents: list[RunningAgent], how: signal.Signals, says: str
) -> None:
    """Killed (its connection drops) or stopped (it says nothing more): the
    run fails within SILENT_S (3 heartbeats and a second), naming the host,
    and the other host's engine is stopped."""
    config, out = tmp_path / "case.yaml", tmp_path / "out"
    victim = two_agents[1]

    def kill_when_loading() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if list(victim.data_root.glob("runs/*/a/load")):
                time.sleep(0.5)
                victim.process.send_signal(how)
                return
            time.sleep(0.05)

    with EtcdStandIn() as etcd:
        _case(config, etcd.endpoint, two_agents, requests=20000, rate=1000)
        killer = threading.Thread(target=kill_when_loading)
        killer.start()
        started = time.monotonic()
        result = run_cli("run", str(config), "--out", str(out))
        took = time.monotonic() - started
        killer.join()
        victim.process.send_signal(signal.SIGCONT)
    assert result.code == 1, result.err[-3000:]
    assert f"load host 1 failed: agent {victim.address}" in result.err, result.err[-3000:]
    assert says in result.err
    assert took < 15, took  # not the 20 s the load would have taken
    # the surviving agent's call was cancelled, which stopped its engine
    client = two_agents[0].client(TOKEN)
    deadline = time.monotonic() + 5
    while client.stop_load("x", "a") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.stop_load("x", "a") is False
    assert not list(two_agents[0].data_root.glob("runs/*/a/load"))


# `python -m dbtester` as from a terminal: a background job starts with
# SIGINT ignored, and Python then never raises KeyboardInterrupt.
_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys;"
    " signal.signal(signal.SIGINT, signal.default_int_handler);"
    " sys.argv[0] = 'dbtester';"
    " runpy.run_module('dbtester', run_name='__main__')"
)


def test_ctrl_c_keeps_what_the_load_hosts_recorded(
    tmp_path: Path, two_agents: list[RunningAgent]
) -> None:
    config, out, log = tmp_path / "case.yaml", tmp_path / "out", tmp_path / "run.log"
    with EtcdStandIn() as etcd:
        _case(config, etcd.endpoint, two_agents, requests=20000, rate=1000)
        with log.open("wb") as err:
            run = subprocess.Popen(
                [sys.executable, "-c", _AS_FROM_A_TERMINAL, "run", str(config), "--out", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, "DBTESTER_AGENT_TOKEN": TOKEN},
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + 60
            while "from 2 load hosts" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.1)
            time.sleep(3.0)
            os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            code = run.wait(timeout=60)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    text = log.read_text()
    assert code == 130, text[-3000:]
    assert "Traceback" not in text
    records = Records.load(out / "a" / "client-latency.npz")
    assert 1000 < len(records) < 19000, len(records)
    assert all((out / "a" / f"client-{i}-latency.npz").exists() for i in range(2))
    assert "interrupted" in json.loads((out / "a" / "run.json").read_text())["error"]
    for agent in two_agents:
        assert agent.client(TOKEN).stop_load("x", "a") is False  # no load left running


@pytest.mark.solo
def test_a_load_host_short_of_cpu_is_named(
    tmp_path: Path, run_cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host 1's agent, and so its engine, at nice 19 on a core with a busy
    loop; host 0, the stand-in and the controller on the other cores. Host
    1's engine waits for a CPU whenever it has work, so the report names it
    as the client that set the pace, and host 0 not."""
    crowded, rest = split_cores()
    monkeypatch.setenv("DBTESTER_AGENT_TOKEN", TOKEN)
    config, out = tmp_path / "case.yaml", tmp_path / "out"
    agents: list[RunningAgent] = []
    with pinned(rest):
        try:
            agents.append(_agent(tmp_path / "load-0"))
            with pinned(crowded):  # the agent and every thread it starts
                agents.append(_agent(tmp_path / "load-1"))
            _nicest(agents[1].process.pid)
            # Host 1 runs at nice 19 (weight 15 against the loop's 1024), so it
            # gets about 1.5% of the core: less than its 2,000/s wants, and
            # enough to connect within the engine's 1 s (at 0.7%, with two
            # loops, it sometimes did not).
            with EtcdStandIn() as etcd, busy_loops(crowded, 1):
                _case(config, etcd.endpoint, agents, requests=12001, rate=4000, clients=64)
                result = run_cli("run", str(config), "--out", str(out))
        finally:
            for agent in agents:
                stop_agent(agent)
    assert result.code == 0, result.err[-3000:]
    hosts = json.loads((out / "a" / "run.json").read_text())["load_hosts"]
    shares = [
        (h["engine_cpu_seconds"], h["cpu_wait_seconds"], h["ended_unix"] - h["started_unix"])
        for h in hosts
    ]
    runnable = [(run + wait) / took for run, wait, took in shares]
    print(f"engine threads runnable: host 0 {runnable[0]:.0%}, host 1 {runnable[1]:.0%}")
    assert [h["cpu_limited"] for h in hosts] == [False, True], shares
    readme = (out / "README.md").read_text()
    assert "host 1 (" in readme and "ran its engine at its CPU limit" in readme
    assert "host 0 (" not in readme.split("ran its engine at its CPU limit")[0], readme


def _nicest(pid: int) -> None:
    """Every thread of ``pid`` at nice 19, and so the threads they start; and
    its session's scheduling group too, where the kernel groups sessions
    (autogroup): the agent runs in a session of its own, and a group's nice
    is what weighs against the busy loops' group there."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.setpriority(os.PRIO_PROCESS, int(task.name), 19)
    group = Path(f"/proc/{pid}/autogroup")
    if group.exists():
        group.write_text("19")
