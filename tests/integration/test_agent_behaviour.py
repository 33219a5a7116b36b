"""The agent's contract with real processes: auth, bad requests, failures, watchdog."""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dbtester.agent.client import AgentClient
from dbtester.errors import AgentError
from dbtester.install import find_installed
from dbtester.util.host import host_facts
from tests.integration.agents import (
    RunningAgent,
    alive,
    loopback_peers,
    start_agent,
    stop_agent,
)
from tests.support.poll import poll_until

ETCD = "3.5.17"


@pytest.fixture
def etcd_home(installed_home) -> str:
    return str(installed_home("etcd", ETCD))


@pytest.fixture
def agent(tmp_path: Path, etcd_home: str):
    running = start_agent(tmp_path / "agent", token="t" * 32, home=etcd_home)
    yield running
    stop_agent(running)


def _start(client: AgentClient, **overrides: object):
    args: dict[str, Any] = {
        "run_id": "r",
        "database_id": "db",
        "kind": "etcd",
        "version": ETCD,
        "member_index": 0,
        "peers": loopback_peers("etcd", 1),
        "flags": {},
    }
    args.update(overrides)
    return client.start(**args)


def _sampled(agent: RunningAgent, rows: int) -> bool:
    """Whether member 0 of run "r" has ``rows`` samples in its metrics.csv."""
    path = agent.data_root / "runs" / "r" / "db" / "member-0" / "metrics.csv"
    try:
        return path.read_text().count("\n") - 1 >= rows  # the header, then a line a row
    except FileNotFoundError:
        return False


def _members(agent) -> list[Path]:
    runs = agent.data_root / "runs"
    return list(runs.glob("*/*/member-*")) if runs.exists() else []


@pytest.mark.parametrize("token", ["", "wrong-token-wrong-token"])
def test_without_the_right_token_nothing_is_served(agent, token: str) -> None:
    client = agent.client(token=token)
    with pytest.raises(AgentError) as caught:
        client.health()
    assert caught.value.status == "UNAUTHENTICATED"
    with pytest.raises(AgentError) as caught:
        _start(client)
    assert caught.value.status == "UNAUTHENTICATED"
    assert _members(agent) == []  # nothing was started
    assert "t" * 32 not in agent.log.read_text()  # the token is never logged


def test_health_with_the_token(agent) -> None:
    assert agent.client().health() == "SERVING"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"kind": "mongodb"}, "unknown kind 'mongodb'; allowed: etcd, zookeeper, consul"),
        ({"version": "9.9.9"}, f"versions this agent can run: {ETCD}"),
        ({"version": "3.5;reboot"}, "is not a version"),
        ({"run_id": "../../etc"}, "no paths"),
        ({"flags": {"snap_count": 5}}, "bad etcd flags"),
        ({"member_index": 3}, "member_index 3 but 1 peers"),
    ],
)
def test_bad_requests_are_invalid_argument(
    agent, overrides: dict[str, object], needle: str
) -> None:
    with pytest.raises(AgentError) as caught:
        _start(agent.client(), **overrides)
    assert caught.value.status == "INVALID_ARGUMENT"
    assert needle in str(caught.value)
    assert agent.address in str(caught.value)  # the error names the agent


def test_port_already_in_use(agent) -> None:
    peers = loopback_peers("etcd", 1)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", peers[0].ports["client"]))
        squatter.listen(1)
        with pytest.raises(AgentError) as caught:
            _start(agent.client(), peers=peers)
    assert caught.value.status == "FAILED_PRECONDITION"
    assert f"port already in use: client {peers[0].ports['client']}" in str(caught.value)


def test_a_database_that_fails_to_start_shows_its_log(agent) -> None:
    # Two members named the same way in the initial cluster: etcd refuses to start.
    peers = loopback_peers("etcd", 2)
    peers[1] = type(peers[1])(
        peers[1].name,
        "127.0.0.1",
        {**peers[1].ports, "peer": peers[0].ports["peer"]},
    )
    with pytest.raises(AgentError) as caught:
        _start(agent.client(), peers=peers)
    assert caught.value.status == "FAILED_PRECONDITION"
    assert "exited with code" in str(caught.value) and "log tail" in str(caught.value)


def test_kill_9_of_the_database_is_reported_and_rows_are_kept(
    agent, etcd_home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = agent.client()
    reply = _start(client)
    # the reply describes the agent's host and the files the member runs
    host = host_facts()
    assert (reply.host.cpu_model, reply.host.cores) == (host.cpu_model, host.cores)
    assert reply.host.kernel == host.kernel and reply.host.memory_gib == host.memory_gib
    monkeypatch.setenv("DBTESTER_HOME", etcd_home)
    installed = find_installed("etcd", ETCD)
    assert installed is not None and reply.binary_sha256 == installed.sha256()
    # rows to keep: two samples of the running member before it is killed
    poll_until(lambda: _sampled(agent, 2), 30, message="no two samples of the member")
    os.kill(reply.pid, signal.SIGKILL)
    poll_until(
        lambda: client.status().members[0].state != "running",
        30,
        interval_s=0.1,
        message="the agent never saw its member die",
    )
    member = client.status().members[0]
    assert member.state == "exited"
    assert member.exit_code == -signal.SIGKILL
    assert "exited unexpectedly" in member.error
    result = client.stop("r", "db", 0)
    assert result.archived_to  # the data of a failed member is kept
    target = agent.data_root.parent / "m.csv"
    client.fetch("r", "db", 0, "metrics.csv", target)
    rows = list(csv.DictReader(target.open()))
    assert len(rows) >= 2 and int(rows[0]["rss_bytes"]) > 0


def test_controller_silence_stops_the_database(agent) -> None:
    client = agent.client()
    reply = _start(client, heartbeat_timeout_s=2.0)
    client.close()  # the controller goes quiet
    # The watchdog stops it after 2 s without a call; the 30 s only tell a
    # watchdog that never fires from a busy machine (no timing is judged).
    poll_until(
        lambda: not alive(reply.pid), 30, interval_s=0.2, message="the agent did not stop it"
    )
    # It keeps the data dir after the process is gone: on a busy machine the
    # move may come a moment after the process's end (same 30-s bound).
    kept = agent.data_root / "failed"
    poll_until(
        lambda: any(kept.glob("r/db/member-0")),
        30,
        interval_s=0.2,
        message="the data dir was not kept",
    )
    assert (agent.data_root / "runs" / "r" / "db" / "member-0" / "metrics.csv").exists()
    assert "no call from the controller" in agent.log.read_text()
    # a controller that asks later learns who stopped it, and why
    result = agent.client().stop("r", "db", 0)
    assert result.stopped_by.startswith("the agent's watchdog, after no call from the controller")
    assert result.archived_to


def test_sigterm_to_the_agent_stops_its_database(agent) -> None:
    reply = _start(agent.client())
    agent.process.send_signal(signal.SIGTERM)
    agent.process.wait(30)
    assert not alive(reply.pid)
    assert agent.process.returncode == 0


def test_no_token_serves_loopback(tmp_path: Path, etcd_home: str) -> None:
    running = start_agent(tmp_path / "open", token=None, home=etcd_home)
    try:
        assert running.client().health() == "SERVING"
    finally:
        stop_agent(running)


def test_listen_on_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "dbtester",
                "agent",
                "serve",
                "--listen",
                f"127.0.0.1:{port}",
                "--data-root",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(directory: Path, name: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        f"/CN={name}",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        cwd=directory,
    )


def _make_cert(directory: Path, ca: str, name: str) -> None:
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        cwd=directory,
    )
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        f"{name}.pem",
        cwd=directory,
    )


def test_mutual_tls(tmp_path: Path, etcd_home: str) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    _make_ca(certs, "ca")
    _make_ca(certs, "otherca")
    _make_cert(certs, "ca", "server")
    _make_cert(certs, "ca", "client")
    _make_cert(certs, "otherca", "stranger")
    running = start_agent(
        tmp_path / "tls",
        token=None,
        home=etcd_home,
        extra=[
            "--tls-cert",
            str(certs / "server.pem"),
            "--tls-key",
            str(certs / "server.key"),
            "--tls-ca",
            str(certs / "ca.pem"),
        ],
    )
    ca = (certs / "ca.pem").read_bytes()
    try:
        good = AgentClient(
            running.address,
            tls_ca=ca,
            tls_cert=(certs / "client.pem").read_bytes(),
            tls_key=(certs / "client.key").read_bytes(),
        )
        assert good.health() == "SERVING"
        stranger = AgentClient(
            running.address,
            tls_ca=ca,
            tls_cert=(certs / "stranger.pem").read_bytes(),
            tls_key=(certs / "stranger.key").read_bytes(),
        )
        with pytest.raises(AgentError):
            stranger.health()
        wrong_ca = AgentClient(
            running.address,
            tls_ca=(certs / "otherca.pem").read_bytes(),
            tls_cert=(certs / "client.pem").read_bytes(),
            tls_key=(certs / "client.key").read_bytes(),
        )
        with pytest.raises(AgentError):
            wrong_ca.health()
        for client in (good, stranger, wrong_ca):
            client.close()
    finally:
        stop_agent(running)


def test_a_database_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path, etcd_home: str
) -> None:
    """A member whose main process ignores SIGTERM and leaves a descendant that
    ignores it too: stop escalates to SIGKILL of the whole process group after
    the grace period, and nothing it started survives."""
    real = Path(etcd_home) / "etcd" / ETCD / "etcd"
    stubborn = tmp_path / "stubborn-etcd"
    stubborn.write_text(
        "#!/bin/sh\n"
        "trap '' TERM\n"  # inherited by the children below (etcd re-enables its own)
        f'{real} "$@" &\n'
        "sleep 3600 &\n"
        "wait\n"
    )
    stubborn.chmod(0o755)
    grace = 2.0
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"stop_grace_s: {grace}\nbinaries:\n  etcd:\n    '0.0.0-stubborn': {{etcd: {stubborn}}}\n"
    )
    running = start_agent(
        tmp_path / "agent", token="s" * 32, home=etcd_home, extra=["--config", str(config)]
    )
    try:
        client = running.client()
        reply = _start(client, version="0.0.0-stubborn")
        family = poll_until(
            lambda: found if len(found := running.descendants()) >= 3 else [],
            30,
            interval_s=0.1,
            message="the shell, etcd and sleep never all ran",
        )
        started = time.monotonic()
        result = client.stop("r", "db", 0)
        took = time.monotonic() - started
        print(f"stop of a SIGTERM-ignoring member: {took:.2f} s (grace {grace:.0f} s)")
        assert result.killed
        # The stop's promise (dbtester/agent/member.py): SIGTERM, the whole
        # grace, then SIGKILL. So the stop took the grace at least (one
        # monotonic clock, exact), and the call contains the stop (causal).
        # How long the SIGKILL and measuring the data dir take is promised
        # nowhere: no upper bound; the kill shows in `killed` and below.
        assert grace <= result.stop_seconds <= took, (result.stop_seconds, took)
        # SIGKILL to the group: gone once the kernel reaps them
        poll_until(
            lambda: not alive(reply.pid) and not [p for p in family if alive(p)],
            30,
            interval_s=0.1,
            message=lambda: f"left running: {[p for p in [reply.pid, *family] if alive(p)]}",
        )
    finally:
        stop_agent(running)
