"""Reaching the agents a database runs on: embedded (started here, on loopback)
or remote (already serving at the configured hosts).

In the embedded default each member gets its own ``dbtester agent serve``
subprocess — the same command a server machine runs — on 127.0.0.1 with a
port it picks itself, a token generated for this run, and its data under the
run's scratch directory. They are stopped by PID when the run ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dbtester.agent.client import AgentClient
from dbtester.errors import DbtesterError
from dbtester.util.paths import write_private
from dbtester.util.procs import with_parent_death_signal

START_TIMEOUT_S = 30.0

__all__ = [
    "EmbeddedAgents",
    "LocalAgent",
    "ensure_remote_token",
    "remote_tls",
    "remote_token",
    "spawn_agent",
]


@dataclass
class LocalAgent:
    process: subprocess.Popen[str]
    address: str
    data_root: Path
    log: Path


class EmbeddedAgents:
    """``count`` agents on loopback for one database; a context manager."""

    def __init__(self, scratch: Path, count: int, heartbeat_timeout_s: float) -> None:
        self.scratch = scratch
        self.count = count
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.token = secrets.token_hex(24)
        self.agents: list[LocalAgent] = []

    def __enter__(self) -> EmbeddedAgents:
        try:
            self.scratch.mkdir(parents=True, exist_ok=True)
            token_file = write_private(self.scratch / "agent.token", self.token)
            # All launched first, then waited for: each agent's start is mostly
            # Python importing grpc, so they overlap (a trial starts ~1 s sooner
            # with 3 members).
            launched = [self._launch(i, token_file) for i in range(self.count)]
            self.agents.extend(launched)
            for agent in launched:
                agent.address = _await_address(agent)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _launch(self, index: int, token_file: Path) -> LocalAgent:
        options = [
            "--token-file",
            str(token_file),
            "--heartbeat-timeout",
            str(self.heartbeat_timeout_s),
        ]
        return _launch_agent(self.scratch / f"agent-{index}", options)

    def clients(self) -> list[AgentClient]:
        return [AgentClient(a.address, self.token) for a in self.agents]

    def close(self) -> None:
        """SIGTERM every agent (each stops its database first), then SIGKILL."""
        for agent in self.agents:
            if agent.process.poll() is None:
                agent.process.send_signal(signal.SIGTERM)
        for agent in self.agents:
            try:
                agent.process.wait(30)
            except subprocess.TimeoutExpired:
                agent.process.kill()
                agent.process.wait()
            if agent.process.stdout is not None:
                agent.process.stdout.close()
        self.agents = []


def spawn_agent(root: Path, options: list[str], env: Mapping[str, str] | None = None) -> LocalAgent:
    """Start ``dbtester agent serve`` on a port of its choosing on loopback, with
    its data under ``root/data``, and wait for the line that names the port."""
    agent = _launch_agent(root, options, env)
    agent.address = _await_address(agent)
    return agent


def _launch_agent(
    root: Path, options: list[str], env: Mapping[str, str] | None = None
) -> LocalAgent:
    """Start ``dbtester agent serve`` without waiting for it; its address is
    known once :func:`_await_address` has read it."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / "agent.stderr"
    argv = [
        sys.executable,
        "-m",
        "dbtester",
        "agent",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-root",
        str(root / "data"),
        *options,
    ]
    with log.open("w") as err:
        # Its own session: a Ctrl-C at the terminal reaches the controller, which
        # then stops the databases through the agents in order. A controller
        # killed outright takes its agents with it (SIGTERM: they stop their
        # databases first).
        process = subprocess.Popen(
            with_parent_death_signal(argv, "TERM"),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    return LocalAgent(process, "", root / "data", log)


def _await_address(agent: LocalAgent) -> str:
    """The address ``agent`` listens on, from the line it prints when serving;
    DbtesterError (with its log) if it does not print it in time."""
    process = agent.process
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("dbtester agent listening on "):
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
        root = agent.data_root.parent
        raise DbtesterError(f"agent in {root} did not start:\n{agent.log.read_text()[-2000:]}")
    return line.split()[-1]


def remote_tls() -> dict[str, bytes]:
    """TLS material for remote agents from $DBTESTER_AGENT_TLS_CA (required for
    TLS) and, for mutual TLS, $DBTESTER_AGENT_TLS_CERT and $DBTESTER_AGENT_TLS_KEY."""
    names = {
        "tls_ca": "DBTESTER_AGENT_TLS_CA",
        "tls_cert": "DBTESTER_AGENT_TLS_CERT",
        "tls_key": "DBTESTER_AGENT_TLS_KEY",
    }
    found: dict[str, bytes] = {}
    for key, variable in names.items():
        if path := os.environ.get(variable):
            try:
                found[key] = Path(path).read_bytes()
            except OSError as exc:
                raise DbtesterError(f"${variable}: cannot read {path}: {exc.strerror}") from None
    if found and "tls_ca" not in found:
        raise DbtesterError("$DBTESTER_AGENT_TLS_CERT/KEY need $DBTESTER_AGENT_TLS_CA too")
    return found


def _token_file() -> Path:
    return Path(
        os.environ.get("DBTESTER_AGENT_TOKEN_FILE")
        or Path.home() / ".config" / "dbtester" / "agent.token"
    )


def remote_token() -> str | None:
    """The token for remote agents: $DBTESTER_AGENT_TOKEN, or the file named by
    $DBTESTER_AGENT_TOKEN_FILE (default ~/.config/dbtester/agent.token)."""
    if token := os.environ.get("DBTESTER_AGENT_TOKEN"):
        return token
    try:
        return _token_file().read_text().strip() or None
    except OSError:
        return None


def ensure_remote_token(say: Callable[[str], None]) -> str:
    """The remote agents' token; made (and saved 0600) on first use."""
    if token := remote_token():
        return token
    path = _token_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_hex(32)
    # O_EXCL: never overwrite a token another process just wrote.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    say(f"wrote a new agent token to {path} (mode 0600)")
    return token
