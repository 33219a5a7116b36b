"""free_port: ports a member can keep for its whole run."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dbtester.errors import BadInputError
from dbtester.util import net
from dbtester.util.net import free_port


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)  # never the same one twice
    assert all(p < low for p in ports)  # no outgoing connection can take one
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # and nothing held it


def test_a_port_in_use_is_not_handed_out() -> None:
    """A tenth of the range held by listeners free_port never handed out: it
    must find each taken (its bind check), not just remember its own."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    held = []
    try:
        for port in range(10_001, low, 10):
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sock.listen()
            held.append(sock)
        taken = {s.getsockname()[1] for s in held}
        assert len(taken) > 1000
        assert not taken & {free_port() for _ in range(1000)}
    finally:
        for sock in held:
            sock.close()


def test_the_range_can_be_set_for_processes_sharing_a_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(net.PORT_RANGE_ENV, "23000-23099")
    ports = {free_port() for _ in range(50)}
    assert len(ports) == 50
    assert all(23000 <= p <= 23099 for p in ports)


@pytest.mark.parametrize("value", ["23000", "9-80", "30000-20000", "a-b", "20000-70000"])
def test_a_range_that_is_not_one_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(net.PORT_RANGE_ENV, value)
    with pytest.raises(BadInputError, match=r"DBTESTER_PORT_RANGE=.*LOW-HIGH"):
        free_port()
