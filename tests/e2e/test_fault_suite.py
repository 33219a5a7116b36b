"""The fault suite: a stalled agent, a killed controller, a database killed
mid-load, a member lost mid-write, a taken port, bad input that must not
reach any agent, and secrets that must not leak. Real processes throughout;
each test prints the figure it measures (pytest -s shows them)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from dbtester.control.cluster import AGENT_WATCHDOG_S, HEARTBEAT_S, MISSED_BEATS
from tests.integration.agents import RunningAgent, alive, start_agent, stop_agent
from tests.support.bad_cases import CASES
from tests.support.cluster import finish, start_run, wait_for_text
from tests.support.phases import ETCD, agent_of, write_case

pytestmark = pytest.mark.integration


def _etcd_pids(root: int) -> list[int]:
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p.pid for p in children if p.name() == "etcd"]


def _hosts(agent: RunningAgent) -> list[dict[str, object]]:
    """The test case's ``hosts:`` for one agent already serving on loopback."""
    host, port = agent.address.rsplit(":", 1)
    return [{"address": host, "agent_port": int(port)}]


def _reap(run: subprocess.Popen[bytes], pids: list[int]) -> None:
    """After a failed test: the run's group, then every PID it started by its own
    (databases run in sessions of their own), so later tests find free ports."""
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_gone(pids: list[int], timeout: float) -> float:
    """Seconds until every PID is gone (or the timeout)."""
    started = time.monotonic()
    while any(alive(p) for p in pids) and time.monotonic() - started < timeout:
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_stalled_agent_fails_its_database(tmp_path: Path, installed_home) -> None:
    """SIGSTOP for 10 s: the database that agent serves keeps answering, but the
    run must say the agent stalled instead of counting it as a healthy run."""
    home = installed_home("etcd", ETCD)
    # 15 s at 4,000/s: the load outlasts the stall's detection (unthrottled, it
    # could end first, and the agent's watchdog would stop its member instead)
    config = write_case(
        tmp_path / "case.yaml", ["stalled", "after"], 60000, {"rate": 4000}, after=4000
    )
    log = tmp_path / "run.log"
    run = start_run(home, config, tmp_path / "out", log)
    members: list[int] = []
    try:
        wait_for_text(log, "stalled: write load")
        time.sleep(1.0)  # the stimulus: the load runs 1 s before the stall
        agent = agent_of(run, "stalled")
        members = _etcd_pids(run.pid)
        stopped_at = time.time()
        agent.send_signal(signal.SIGSTOP)
        time.sleep(10)  # the stimulus: a stall longer than 3 missed heartbeats
        agent.send_signal(signal.SIGCONT)
        code = finish(run)
    finally:
        _reap(run, members)
    text = log.read_text()
    assert code == 1, text[-3000:]
    stalled = json.loads((tmp_path / "out" / "stalled" / "run.json").read_text())
    assert "stopped answering" in stalled["error"] or "not answering" in stalled["error"]
    detection = stalled["load"]["ended_unix"] - stopped_at
    print(f"stall reported {detection:.2f} s after SIGSTOP")
    # 3 missed heartbeats, then the load workers drain (slower on a loaded machine)
    assert detection <= MISSED_BEATS * HEARTBEAT_S + 3.0
    assert "stalled: FAILED" in (tmp_path / "out" / "README.md").read_text()
    after = json.loads((tmp_path / "out" / "after" / "run.json").read_text())
    assert after["error"] == ""
    assert members and not any(alive(p) for p in members)


@pytest.mark.parametrize("members", [3])
def test_a_killed_controller_leaves_no_database_running(
    tmp_path: Path, installed_home, members: int
) -> None:
    """kill -9 of `dbtester run`: each embedded agent gets SIGTERM from the
    kernel (parent-death signal), stops its member and flushes its metrics."""
    home = installed_home("etcd", ETCD)
    config = write_case(tmp_path / "case.yaml", ["orphaned"], 400000, members=members)
    log = tmp_path / "run.log"
    run = start_run(home, config, tmp_path / "out", log)
    etcds: list[int] = []
    agents: list[psutil.Process] = []
    try:
        wait_for_text(log, "orphaned: write load")
        time.sleep(2.0)  # the stimulus: the controller dies 2 s into its load
        etcds = _etcd_pids(run.pid)
        agents = [
            p for p in psutil.Process(run.pid).children(recursive=True) if "serve" in p.cmdline()
        ]
        roots = [Path(a.cmdline()[a.cmdline().index("--data-root") + 1]) for a in agents]
        # The load engine runs inside the controller: nothing but the agents
        # (and their databases) could outlive it.
        strays = [
            p.pid
            for p in psutil.Process(run.pid).children()
            if "serve" not in p.cmdline() and "resource_tracker" not in " ".join(p.cmdline())
        ]
        killed_at = time.time()
        run.send_signal(signal.SIGKILL)  # the controller only: no chance to clean up
        run.wait()
        took = _wait_gone(etcds, timeout=60)
        agents_took = took + _wait_gone([a.pid for a in agents], timeout=60)
    finally:
        _reap(run, etcds + [a.pid for a in agents])
    print(
        f"after kill -9 of the controller: {len(etcds)} members gone in {took:.2f} s,"
        f" their agents in {agents_took:.2f} s"
    )
    assert not strays, f"processes besides the agents under the controller: {strays}"
    assert len(etcds) == members and not any(alive(p) for p in etcds)
    assert took < 10 + 1  # the stop grace period + 1 s
    assert agents_took < 60
    for root in roots:
        csvs = list(root.glob("**/metrics.csv"))
        assert csvs, f"no metrics under {root}"
        last = csvs[0].read_text().strip().splitlines()[-1]
        assert int(last.split(",")[0]) / 1000 > killed_at - 2  # flushed to the end
    shutil.rmtree(roots[0].parents[2])  # the dead controller's scratch: $DBTESTER_HOME/runs/ID


def test_a_remote_agent_stops_its_database_when_the_controller_goes_quiet(
    tmp_path: Path, installed_home
) -> None:
    """An agent on another machine cannot see the controller die: its watchdog
    stops the database after heartbeat_timeout_s without a call."""
    home = installed_home("etcd", ETCD)
    token = "f" * 40
    agent = start_agent(tmp_path / "agent", token=token, home=home)
    try:
        config = write_case(tmp_path / "case.yaml", ["remote"], 400000, hosts=_hosts(agent))
        log = tmp_path / "run.log"
        run = start_run(home, config, tmp_path / "out", log, DBTESTER_AGENT_TOKEN=token)
        etcds: list[int] = []
        try:
            wait_for_text(log, "remote: write load")
            time.sleep(1.0)  # the stimulus: the controller dies 1 s into its load
            etcds = [p for p in agent.descendants() if psutil.Process(p).name() == "etcd"]
            run.send_signal(signal.SIGKILL)
            run.wait()
            took = _wait_gone(etcds, timeout=60)
        finally:
            _reap(run, etcds)
        print(f"remote agent stopped its database {took:.2f} s after the controller died")
        assert etcds and not any(alive(p) for p in etcds)
        # the controller's watchdog setting, then the stop grace (10 s) at most
        assert AGENT_WATCHDOG_S - 1.5 <= took <= AGENT_WATCHDOG_S + 10 + 2
        assert "no call from the controller" in agent.log.read_text()
        assert token not in agent.log.read_text()
    finally:
        stop_agent(agent)


def test_a_database_killed_mid_load(tmp_path: Path, installed_home) -> None:
    home = installed_home("etcd", ETCD)
    config = write_case(tmp_path / "case.yaml", ["victim"], 400000)
    log = tmp_path / "run.log"
    run = start_run(home, config, tmp_path / "out", log)
    try:
        wait_for_text(log, "victim: write load")
        time.sleep(3.0)  # the stimulus: the member dies 3 s into the load
        (etcd,) = _etcd_pids(run.pid)
        os.kill(etcd, signal.SIGKILL)
        code = finish(run)
    finally:
        _reap(run, [])
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "Traceback" not in text
    record = json.loads((tmp_path / "out" / "victim" / "run.json").read_text())
    counts = record["load"]["counts"]
    failed = {k: n for k, n in counts.items() if k != "ok"}
    assert counts["ok"] > 0 and failed, counts
    assert "exited unexpectedly" in record["error"] or "stopped early" in record["error"]
    # its one member gone, the keys were not asked for again and again
    assert "counting keys failed: 0 of 1 member running, fewer than the 1" in text, text[-3000:]
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "requests failed (" in readme and "throughput went from" in readme
    for kind in failed:
        assert kind in readme
    print(f"errors by kind: {failed}")


def test_write_accounting_when_a_member_dies_mid_load(tmp_path: Path, installed_home) -> None:
    """One member of three killed mid-write: the run fails (a member died), and
    the write accounting is still reported with nothing lost."""
    home = installed_home("etcd", ETCD)
    config = write_case(tmp_path / "case.yaml", ["three"], 400000, members=3)
    log = tmp_path / "run.log"
    run = start_run(home, config, tmp_path / "out", log)
    family: list[int] = []
    try:
        wait_for_text(log, "three: write load")
        time.sleep(3.0)  # the stimulus: the member dies 3 s into the load
        agents = [
            p for p in psutil.Process(run.pid).children(recursive=True) if "serve" in p.cmdline()
        ]
        family = _etcd_pids(run.pid) + [a.pid for a in agents]
        last = next(a for a in agents if "/three/agent-2" in " ".join(a.cmdline()))
        (etcd,) = [c.pid for c in last.children(recursive=True) if c.name() == "etcd"]
        os.kill(etcd, signal.SIGKILL)
        code = finish(run)
    finally:
        _reap(run, family)
    text = log.read_text()
    assert code == 1, text[-3000:]
    record = json.loads((tmp_path / "out" / "three" / "run.json").read_text())
    assert "member 2" in record["error"]
    v = record["verification"]
    assert v is not None, text[-3000:]
    assert v["attempted"] == v["acknowledged"] + v["failed"] + v["unknown"]
    assert v["lost"] == 0 and v["unexpected"] == 0
    assert v["acknowledged"] <= v["found"] <= v["acknowledged"] + v["unknown"]
    assert "writes attempted" in text and "unknown outcome" in text
    print(f"accounting: {v}")


def test_a_taken_port_fails_before_any_load(tmp_path: Path, installed_home) -> None:
    home = installed_home("etcd", ETCD)
    token = "p" * 40
    agent = start_agent(tmp_path / "agent", token=token, home=home)
    squatter = socket.socket()
    try:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            squatter.bind(("127.0.0.1", 2379))  # etcd's client port on a remote host
        except OSError:
            pytest.skip("port 2379 is in use on this machine already")
        squatter.listen(1)
        config = write_case(tmp_path / "case.yaml", ["blocked"], 1000, hosts=_hosts(agent))
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "dbtester",
                "run",
                "--no-charts",
                str(config),
                "--out",
                str(tmp_path / "o"),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "DBTESTER_HOME": home, "DBTESTER_AGENT_TOKEN": token},
            timeout=120,
            check=False,
        )
    finally:
        squatter.close()
        stop_agent(agent)
    assert result.returncode == 1, result.stderr
    assert "port already in use: client 2379" in result.stderr
    assert "write load" not in result.stderr  # found before any load started
    assert "Traceback" not in result.stderr


def test_an_unusable_data_root_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dbtester",
            "agent",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-root",
            str(blocker / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert f"data root {blocker / 'data'} is not writable: Not a directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unusable_dbtester_home_is_a_clear_error(tmp_path: Path, run_cli, monkeypatch) -> None:
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("DBTESTER_HOME", str(blocker))
    config = write_case(tmp_path / "case.yaml", ["x"], 10)
    result = run_cli("run", "--no-charts", str(config), "--out", str(tmp_path / "out"))
    assert result.code in (1, 2), result.err
    assert str(blocker) in result.err and "Traceback" not in result.err


@pytest.mark.parametrize(("text", "where"), [c[1:3] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_reaches_no_agent(tmp_path: Path, run_cli, monkeypatch, text, where) -> None:
    """`dbtester run` on a malformed case: exit 2 at the file's line and column,
    before anything starts — no agent, no scratch directory, no results."""
    home = tmp_path / "home"
    monkeypatch.setenv("DBTESTER_HOME", str(home))
    config = tmp_path / "case.yaml"
    config.write_text(text)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run_cli("run", "--no-charts", str(config), "--out", str(tmp_path / "out"))
    assert result.code == 2, result.err
    assert f"{config}:{where}:" in result.err and "Traceback" not in result.err
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert not home.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run"], "Missing argument 'CONFIG'"),
        (["run", "x.yaml", "--workers", "0"], "0 is not in the range"),
        (["run", "x.yaml", "--bogus"], "No such option '--bogus'"),
        (["install", "etcd"], "KIND@VERSION"),
        (["publish", "/nonexistent", "s3://b/p"], "does not exist"),
        (["agents", "up"], "Missing argument 'CONFIG'"),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_bad_arguments_exit_2(run_cli, args: list[str], needle: str) -> None:
    result = run_cli(*args)
    assert result.code == 2, (result.code, result.err)
    assert needle in result.err and "Traceback" not in result.err


def test_secrets_stay_out_of_logs_results_and_published_files(
    tmp_path: Path, installed_home
) -> None:
    """A run on a token-protected agent, published: neither the token nor a
    cloud secret appears in any output, log, result or published file."""
    home = installed_home("etcd", ETCD)
    token = "tok-" + os.urandom(16).hex()
    secret = "sec-" + os.urandom(16).hex()
    agent = start_agent(tmp_path / "agent", token=token, home=home)
    try:
        config = write_case(tmp_path / "case.yaml", ["guarded"], 2000, hosts=_hosts(agent))
        case = yaml.safe_load(config.read_text())
        case["publish"] = {"url": f"file://{tmp_path / 'bucket'}"}
        config.write_text(yaml.safe_dump(case))
        env = {
            **os.environ,
            "DBTESTER_HOME": home,
            "DBTESTER_AGENT_TOKEN": token,
            "AWS_SECRET_ACCESS_KEY": secret,
        }
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "dbtester",
                "run",
                str(config),
                "--out",
                str(tmp_path / "out"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    finally:
        stop_agent(agent)
    assert result.returncode == 0, result.stderr[-3000:]
    places = [tmp_path / "out", tmp_path / "bucket", agent.data_root]
    files = [f for place in places for f in place.rglob("*") if f.is_file()]
    assert len(files) > 20
    assert (tmp_path / "bucket" / "summary.txt").exists()
    for text, where in [(result.stdout, "stdout"), (result.stderr, "stderr")] + [
        (f.read_bytes().decode(errors="replace"), str(f)) for f in files
    ]:
        assert token not in text, f"token in {where}"
        assert secret not in text, f"secret in {where}"
    assert (tmp_path / "agent" / "token").stat().st_mode & 0o777 == 0o600
