"""Addresses: ``host:port`` spelled the one way (IPv6 bracketed), loopback
tests, free ports, and which interface carries an address."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

import psutil

from dbtester.errors import BadInputError

__all__ = [
    "PORT_RANGE_ENV",
    "bracket",
    "endpoint_host",
    "free_port",
    "interface_for",
    "is_loopback",
    "join_host_port",
    "local_interface",
    "pick_range",
    "port_free",
    "tcp_open",
]


def bracket(host: str) -> str:
    """``host`` as it goes before ``:port``: IPv6 addresses in brackets."""
    host = host.strip("[]")
    return f"[{host}]" if ":" in host else host


def join_host_port(host: str, port: int) -> str:
    return f"{bracket(host)}:{port}"


def endpoint_host(endpoint: str) -> str:
    """The host of ``HOST:PORT`` (an IPv6 address without its brackets)."""
    return endpoint.rsplit(":", 1)[0].strip("[]")


def is_loopback(host: str) -> bool:
    return host.startswith("127.") or host.strip("[]") in ("::1", "localhost")


#: ports free_port picks from: below Linux's ephemeral range (by default
#: 32768-60999), where every outgoing connection takes its local port. The
#: kernel's own pick (bind to port 0) comes from that range, so a member given
#: one could find it taken, minutes later, by some connection of the load's.
_PICK_LOW = 10_000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed: set[int] = set()
_handing = threading.Lock()


#: ``LOW-HIGH``: the ports free_port picks from instead, for processes that
#: share a machine and must not pick the same free port at the same moment
#: (the test suite's parallel workers each take a slice)
PORT_RANGE_ENV = "DBTESTER_PORT_RANGE"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on or connects from right now, never handed out
    before by this process, and outside the range outgoing connections take
    their ports from (the kernel's pick where that range leaves no room)."""
    low, high = pick_range()
    with _handing:
        for _ in range(200 if high > low else 0):
            port = random.randint(low, high)
            if port not in _handed and _bindable(host, port):
                _handed.add(port)
                return port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as sock:
            sock.bind((host.strip("[]"), 0))
            port = int(sock.getsockname()[1])
        _handed.add(port)
        return port


def pick_range() -> tuple[int, int]:
    """``$DBTESTER_PORT_RANGE`` when set, else the ports below the ephemeral
    range."""
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not value:
        return _PICK_LOW, _ephemeral_start() - 1
    low, _, high = value.partition("-")
    if low.strip().isdigit() and high.strip().isdigit():
        first, last = int(low), int(high)
        if 1024 <= first < last <= 65535:
            return first, last
    raise BadInputError(
        f"{PORT_RANGE_ENV}={value!r}: expected LOW-HIGH, two ports from 1024 to 65535"
        " with LOW below HIGH (e.g. 20000-24999)"
    )


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    """Whether ``port`` can be bound without SO_REUSEADDR: nothing listens on it
    and no connection, not even one closing (TIME_WAIT), uses it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host.strip("[]"), port))
        except OSError:
            return False
    return True


def port_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound (nothing listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def tcp_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def interface_for(address: str) -> str | None:
    """The network interface that carries ``address`` (``lo`` for 127.0.0.1)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%", 1)[0] == address for a in addrs):
            return name
    return None


def local_interface(endpoint: str) -> str | None:
    """The interface this machine uses to reach ``endpoint`` (host:port). A UDP
    'connect' only consults the routing table: no packet is sent."""
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, int(port or 9)))
            local = probe.getsockname()[0]
    except OSError:
        return None
    return interface_for(local)
