"""Real agents for tests: ``dbtester agent serve`` subprocesses on loopback.

Every process started here is stopped by PID (and its databases with it) when
the test ends, pass or fail.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from dbtester.agent.client import AgentClient
from dbtester.control.agents import spawn_agent
from dbtester.databases import KINDS
from dbtester.databases.base import Peer
from dbtester.util import net


def free_port() -> int:
    # below the ephemeral range, never twice (a member's port must stay free)
    return net.free_port()


def loopback_peers(kind: str, count: int) -> list[Peer]:
    return [
        Peer(f"m{i}", "127.0.0.1", {name: free_port() for name in KINDS[kind].default_ports})
        for i in range(count)
    ]


@dataclass
class RunningAgent:
    process: subprocess.Popen[str]
    address: str
    data_root: Path
    token: str | None
    log: Path
    clients: list[AgentClient] = field(default_factory=list)

    def client(self, token: str | None = None) -> AgentClient:
        client = AgentClient(self.address, token if token is not None else self.token)
        self.clients.append(client)
        return client

    def descendants(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


def start_agent(
    root: Path, *, token: str | None = None, extra: list[str] | None = None, home: str | None = None
) -> RunningAgent:
    """A real agent through the controller's own way of starting one."""
    options = list(extra or [])
    if token:
        token_file = root / "token"
        root.mkdir(parents=True, exist_ok=True)
        token_file.write_text(token)
        token_file.chmod(0o600)
        options += ["--token-file", str(token_file)]
    env = {**os.environ, **({"DBTESTER_HOME": home} if home else {})}
    local = spawn_agent(root, options, env)
    return RunningAgent(local.process, local.address, local.data_root, token, local.log)


def stop_agent(agent: RunningAgent) -> None:
    """SIGTERM (the agent stops its databases), then SIGKILL whatever is left, by PID."""
    for client in agent.clients:
        client.close()
    leftovers = agent.descendants()
    terminate(agent.process)
    kill_groups(leftovers)


def terminate(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, 30 s to exit, then SIGKILL: one process, by its PID."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kill_groups(leaders: list[int]) -> None:
    """SIGKILL the process groups these PIDs lead (a database and what it started)."""
    for pid in leaders:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@contextmanager
def agents(
    root: Path, count: int, *, token: str | None = "auto", home: str | None = None
) -> Iterator[list[RunningAgent]]:
    started: list[RunningAgent] = []
    secret = secrets.token_hex(16) if token == "auto" else token
    try:
        for i in range(count):
            started.append(start_agent(root / f"agent-{i}", token=secret, home=home))
        yield started
    finally:
        for agent in started:
            stop_agent(agent)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
