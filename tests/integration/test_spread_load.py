"""``load_hosts:`` through ``dbtester run``: two real agents on loopback share
the load against an etcd stand-in given as an endpoint. One agent's clock is
set 300 ms ahead (``DBTESTER_AGENT_CLOCK_SHIFT_S``; processes on one machine
share its clock): the offset the controller measures must take it out, so
both hosts start within 10 ms of the common start and the merged records are
every request, each exactly once, on the controller's clock."""

from __future__ import annotations

import contextlib
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
from dbtester.control.spread import SILENT_S
from dbtester.results import CLIENT_COLUMNS, Records
from tests.integration.agents import RunningAgent, stop_agent
from tests.integration.cores import busy_loops, pinned, split_cores
from tests.standins.etcd import EtcdStandIn
from tests.support.poll import poll_until

pytestmark = pytest.mark.integration

TOKEN = "spread-load-test-token"
SHIFT_S = 0.3


def _agent(root: Path, shift_s: float = 0.0, data_root: Path | None = None) -> RunningAgent:
    root.mkdir(parents=True, exist_ok=True)
    token_file = root / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    env = {**os.environ, "DBTESTER_AGENT_CLOCK_SHIFT_S": str(shift_s)}
    data = ["--data-root", str(data_root)] if data_root is not None else []
    local = spawn_agent(root, ["--token-file", str(token_file), *data], env)
    data_root = data_root or local.data_root
    return RunningAgent(local.process, local.address, data_root, TOKEN, local.log)


@pytest.fixture
def two_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RunningAgent]]:
    """Two agents on this machine sharing one data root, as two started with
    the default one do: each keeps its load's files apart (a folder named for
    its process), or one's start would delete the other's."""
    monkeypatch.setenv("DBTESTER_AGENT_TOKEN", TOKEN)
    shared = tmp_path / "shared-data"
    agents: list[RunningAgent] = []
    try:
        agents.append(_agent(tmp_path / "load-0", data_root=shared))
        agents.append(_agent(tmp_path / "load-1", SHIFT_S, data_root=shared))
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
        result = run_cli("run", "--no-charts", str(config), "--out", str(out))
        assert result.code == 0, result.err[-3000:]
    record = json.loads((out / "a" / "run.json").read_text())
    hosts = record["load_hosts"]
    assert [h["requests"] for h in hosts] == [1501, 1500]
    assert [h["rate"] for h in hosts] == [500.0, 500.0]
    assert sum(sum(h["counts"].values()) for h in hosts) == 3001
    # The shifted clock is measured, and corrected. An offset taken from a
    # round trip is right to within half that trip (the agent read its clock
    # between our send and our receive): that is the precision relied on.
    for host, shift in zip(hosts, (0.0, SHIFT_S), strict=True):
        assert abs(host["clock_offset_s"] - shift) <= host["clock_rtt_s"] / 2 + 1e-6, host
    # Both hosts start within 10 ms of their intended start (the common start
    # plus i / rate): the start-skew bound the feature promises.
    for host in hosts:
        assert host["start_skew_ms"] is not None and abs(host["start_skew_ms"]) < 10, host
        assert host["cpu_seconds"] > 0 and host["throughput"] > 0  # not timed: > 0
    own = [Records.load(out / "a" / f"client-{i}-latency.npz") for i in range(2)]
    assert [len(r) for r in own] == [1501, 1500]
    assert [r.counts() for r in own] == [{"ok": 1501}, {"ok": 1500}]
    dues = [np.sort(r.due_ns) for r in own]
    # Each host's due times are exact steps of its own schedule (500/s: 2 ms):
    # the engine computes start + j / rate in integer nanoseconds, whatever
    # the machine's load, so only float-to-ns rounding (1 ns) separates them.
    for due in dues:
        assert np.abs(np.diff(due) - 2_000_000).max() <= 2, np.diff(due)
    # Host i's schedule starts at the common start plus i slots (1 / rate =
    # 1 ms), within the 10 ms the feature promises. Early only by the offset's
    # error (half a round trip): an engine never sends before its due time.
    start = record["load"]["started_unix"]
    for i, (due, host) in enumerate(zip(dues, hosts, strict=True)):
        late_ms = (float(due[0]) / 1e9 - (start + i / 1000)) * 1000
        assert -host["clock_rtt_s"] * 500 - 0.01 <= late_ms < 10, (i, late_ms, host)
        assert host["start_skew_ms"] == pytest.approx(late_ms, abs=0.01), host  # us: floats
    # so the two schedules interleave, host 1's one slot after host 0's, give
    # or take the difference of their skews (each within the 10 ms promised)
    between_ms = float(dues[1][0] - dues[0][0]) / 1e6
    assert between_ms - 1.0 == pytest.approx(
        hosts[1]["start_skew_ms"] - hosts[0]["start_skew_ms"], abs=0.01
    )
    # Merged: every request of both hosts exactly once, in due order.
    records = Records.load(out / "a" / "client-latency.npz")
    assert len(records) == 3001 and records.counts() == {"ok": 3001}
    assert np.array_equal(records.due_ns, np.sort(np.concatenate(dues)))
    assert record["verification"]["acknowledged"] == 3001
    assert record["verification"]["found"] == 3001 and record["verification"]["lost"] == 0
    # The hosts' samples, moved onto our clock. On the agent, the first row is
    # taken after its load window opened (started_unix) and the last before it
    # reported the load's end (the latest host's is the load's ended_unix):
    # so on our clock too, if every move was made. Nothing timed is relied on,
    # only the rows' whole milliseconds (1 ms); the shifted host's rows would
    # be 300 ms off if a move were missing (early or late: one bound or the
    # other, the late one as long as the agent reports within 300 ms of its
    # last row).
    for i, host in enumerate(hosts):
        stamps = _sample_ms(out / "a" / f"client-{i}-metrics.csv")
        assert stamps[0] >= host["started_unix"] * 1000 - 1, (i, stamps[0], host)
        assert stamps[-1] <= record["load"]["ended_unix"] * 1000 + 1, (i, stamps[-1], record)
    assert not (out / "a" / "load-hosts").exists()
    # merged exactly: the table's percentiles are numpy's over both hosts' own
    both = np.concatenate([r.latency_ns for r in own]) / 1e6
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["CLIENT-MAX-CPU-USAGE"] > 0 and figures["CLIENT-MAX-MEMORY-USAGE"] > 0
    for p in (50, 99):
        assert figures[f"Latency p{p}"] == pytest.approx(float(np.percentile(both, p)), rel=1e-12)
    readme = (out / "README.md").read_text()
    assert "Load from 2 hosts" in readme and "worst start skew" in readme


def _requests_done(agent: RunningAgent) -> int:
    """How many requests the agent's running load has answered, by its
    samples file's last row (0 before there is one)."""
    for path in agent.data_root.glob(f"runs/*/a/load-{agent.process.pid}/client-metrics.csv"):
        with contextlib.suppress(OSError):
            rows = path.read_text().splitlines()
            if len(rows) > 1 and rows[-1].count(",") == rows[0].count(","):
                return int(rows[-1].split(",")[CLIENT_COLUMNS.index("requests_done")])
    return 0


def _sample_ms(path: Path) -> list[int]:
    """The unix_ms of a samples CSV's rows."""
    with path.open(newline="") as handle:
        return [int(row["unix_ms"]) for row in csv.DictReader(handle)]


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

    killed_at: list[float] = []

    def kill_when_loading() -> None:
        # the stimulus: once the victim's engine has answered requests
        poll_until(lambda: _requests_done(victim) > 0, 60, message="the victim never loaded")
        killed_at.append(time.monotonic())
        victim.process.send_signal(how)

    with EtcdStandIn() as etcd:
        _case(config, etcd.endpoint, two_agents, requests=20000, rate=1000)
        killer = threading.Thread(target=kill_when_loading)
        killer.start()
        result = run_cli("run", "--no-charts", str(config), "--out", str(out))
        ended = time.monotonic()
        killer.join()
        victim.process.send_signal(signal.SIGCONT)
    assert result.code == 1, result.err[-3000:]
    assert f"load host 1 failed: agent {victim.address}" in result.err, result.err[-3000:]
    assert says in result.err
    # Promised: a host gone is noticed within SILENT_S (4 s). The test allows
    # SILENT_S + 10 s from the kill to the run's end, for the teardown on a
    # busy machine; the load still had over 18 s to go, which it must not wait.
    assert killed_at and ended - killed_at[0] < SILENT_S + 10, ended - killed_at[0]
    # the surviving agent's call was cancelled, which stopped its engine
    client = two_agents[0].client(TOKEN)
    poll_until(lambda: not client.stop_load("x", "a"), 30, message="host 0 still loading")
    # and its files went with it (the victim's, in the shared root, stay)
    survivor = two_agents[0]
    assert not list(survivor.data_root.glob(f"runs/*/a/load-{survivor.process.pid}"))


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
                [
                    sys.executable,
                    "-c",
                    _AS_FROM_A_TERMINAL,
                    "run",
                    "--no-charts",
                    str(config),
                    "--out",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, "DBTESTER_AGENT_TOKEN": TOKEN},
                start_new_session=True,
            )
        try:
            # interrupted mid-load: once both hosts have answered requests
            done = poll_until(
                lambda: min(_requests_done(a) for a in two_agents),
                90,
                interval_s=0.1,
                message=lambda: log.read_text()[-2000:],
            )
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
    # what both hosts had answered when interrupted is kept (no timing relied
    # on: counted before the interrupt), and not the whole load
    assert 2 * done <= len(records) < 20000, (done, len(records))
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
                result = run_cli("run", "--no-charts", str(config), "--out", str(out))
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
