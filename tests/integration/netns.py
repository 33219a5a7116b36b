"""Hosts made of network namespaces, for multi-host tests.

One namespace holds a bridge (the "switch"); every host namespace gets a veth
pair whose far end is plugged into that bridge and an address in a private
/24 that exists only inside these namespaces. Nothing is added to the
namespace the tests run in. Each server host can run its own ``sshd -D`` on
its address. ``close()`` kills every process left in the namespaces (by PID,
from ``ip netns pids``) and deletes them, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.agents import alive
from tests.support.poll import poll_until

__all__ = ["Host", "Topology", "cannot_make_namespaces"]

SSHD = Path("/usr/sbin/sshd")


def cannot_make_namespaces() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    if not SSHD.exists():
        return "sshd is not installed (apt-get install openssh-server)"
    name = f"dbt-probe-{secrets.token_hex(3)}"
    probe = subprocess.run(
        ["ip", "netns", "add", name], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    name: str  # the namespace
    address: str
    sshd: subprocess.Popen[bytes] | None = None
    host_key: Path | None = None

    def exec_argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: list[str], check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.exec_argv(argv), text=True, capture_output=True, check=check)

    def rx_bytes(self) -> int:
        out = self.run(["cat", "/sys/class/net/eth0/statistics/rx_bytes"], check=True)
        return int(out.stdout)


@dataclass
class Topology:
    """``servers`` hosts with sshd, then ``loaders`` more (load hosts, with
    sshd too), and one client host on a private /24."""

    root: Path
    servers: int = 3
    loaders: int = 0
    prefix: str = field(
        default_factory=lambda: f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    )
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: list[Host] = field(default_factory=list)
    switch: str = ""

    @property
    def client(self) -> Host:
        return self.hosts[0]

    @property
    def server_hosts(self) -> list[Host]:
        return self.hosts[1 : 1 + self.servers]

    @property
    def load_hosts(self) -> list[Host]:
        return self.hosts[1 + self.servers :]

    @property
    def ssh_hosts(self) -> list[Host]:
        return self.hosts[1:]

    def __enter__(self) -> Topology:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        self.switch = f"dbt-{self.tag}-sw"
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        names = ["client"] + [f"s{i + 1}" for i in range(self.servers)]
        names += [f"l{i + 1}" for i in range(self.loaders)]
        for i, short in enumerate(names):
            host = Host(f"dbt-{self.tag}-{short}", f"{self.prefix}.{i + 10}")
            self.hosts.append(host)
            _ip("netns", "add", host.name)
            _ip(
                "-n",
                self.switch,
                "link",
                "add",
                f"p{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.name,
            )
            _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.name, "link", "set", "eth0", "up")
            _ip("-n", host.name, "link", "set", "lo", "up")

    def start_sshd(self, authorized_keys: Path) -> None:
        """sshd -D on port 22 of every server and load host, key authentication only."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        for host in self.ssh_hosts:
            where = self.root / host.name
            where.mkdir(parents=True, exist_ok=True)
            host.host_key = where / "ssh_host_ed25519_key"
            if not host.host_key.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host.host_key)],
                    check=True,
                )
            config = where / "sshd_config"
            config.write_text(
                f"ListenAddress {host.address}:22\n"
                f"HostKey {host.host_key}\n"
                f"AuthorizedKeysFile {authorized_keys}\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "PermitRootLogin prohibit-password\n"
                "StrictModes no\n"
                "UsePAM no\n"
                "PidFile none\n"
                "Subsystem sftp internal-sftp\n"
                "LogLevel ERROR\n"
            )
            log = (where / "sshd.log").open("wb")
            host.sshd = subprocess.Popen(
                host.exec_argv([str(SSHD), "-D", "-e", "-f", str(config)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        for host in self.ssh_hosts:
            self._wait_port(host, 22)

    def _wait_port(self, host: Host, port: int, timeout: float = 15.0) -> None:
        probe = f"import socket; socket.create_connection(({host.address!r}, {port}), 1).close()"
        poll_until(
            lambda: self.client.run(["python3", "-c", probe]).returncode == 0,
            timeout,
            interval_s=0.2,
            message=f"sshd on {host.address}:{port} did not start",
        )

    def known_hosts_line(self, host: Host) -> str:
        assert host.host_key is not None
        key_type, key = Path(f"{host.host_key}.pub").read_text().split()[:2]
        return f"{host.address} {key_type} {key}\n"

    def close(self) -> None:
        """Kill whatever still runs in the namespaces, then delete them."""
        for host in self.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                host.sshd.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    host.sshd.wait(5)
        for name in [h.name for h in self.hosts] + ([self.switch] if self.switch else []):
            self._kill_all_in(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        for host in self.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                host.sshd.kill()
                host.sshd.wait()

    @staticmethod
    def _kill_all_in(namespace: str) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            out = subprocess.run(
                ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
            )
            pids = [int(p) for p in out.stdout.split()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            # 10 s to go after SIGTERM, then SIGKILL: no failure, a cleanup
            with contextlib.suppress(AssertionError):
                poll_until(_all_gone(pids), 10, interval_s=0.1)


def _all_gone(pids: list[int]) -> Callable[[], bool]:
    """Whether every one of ``pids`` has exited (a condition to poll)."""
    return lambda: not any(alive(p) for p in pids)
