"""Cutting this host off the network, as a scheduled fault (``isolate``), and
letting it back (``heal``): an nftables table that drops every packet in and
out except loopback, the agent's own port and ssh (and, for an isolation
that keeps its clients, the member's client port: its peers are cut off,
its clients still reach it).

Why a firewall rule and not a link down: the agent shares the host's network,
so a link down would cut the controller off from the agent too (no heal, no
heartbeat, no files back). The table is added and deleted whole, with the
``nft`` binary (Debian's nftables package), which needs root or CAP_NET_ADMIN.
Each table's name carries the agent's port, so an agent that starts again on
that port can remove what one killed outright left behind (:func:`sweep`).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from collections.abc import Sequence

from dbtester.errors import MemberError
from dbtester.util.net import is_loopback

__all__ = ["SSH_PORT", "TABLE_PREFIX", "Isolation", "MemberIsolation", "sweep"]

log = logging.getLogger(__name__)

TABLE_PREFIX = "dbtester_isolate_"
#: kept open besides the agent's port, so a person can still log in to mend
SSH_PORT = 22
#: nft answers in milliseconds; a hung one must not hang the fault
_NFT_TIMEOUT_S = 10.0
# Ahead of the usual filter chains (priority 0): a drop is final in any table,
# so the order only matters for how early it drops.
_RULES = """\
table inet {table} {{
  chain input {{
    type filter hook input priority filter - 10; policy accept;
    iifname "lo" accept
    tcp dport {{ {ports} }} accept
    drop
  }}
  chain output {{
    type filter hook output priority filter - 10; policy accept;
    oifname "lo" accept
    tcp sport {{ {ports} }} accept
    drop
  }}
}}
"""


def _nft(args: list[str], script: str | None = None) -> subprocess.CompletedProcess[str]:
    """``nft ARGS`` (``-f -`` with ``script`` on stdin); MemberError when nft is
    missing, hangs or refuses, with its own words."""
    binary = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
    if binary is None:
        raise MemberError(
            "isolate needs the nft command (Debian/Ubuntu: apt-get install nftables)"
            " and root or CAP_NET_ADMIN; it is not installed on this host"
        )
    try:
        done = subprocess.run(
            [binary, *args],
            input=script,
            capture_output=True,
            text=True,
            timeout=_NFT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MemberError(f"nft {' '.join(args)} failed: {exc}") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:500] or f"exit code {done.returncode}"
        raise MemberError(
            f"nft {' '.join(args)} failed: {said} (isolate needs root or CAP_NET_ADMIN)"
        )
    return done


class Isolation:
    """One member's isolation of this host: ``apply`` adds the table, ``remove``
    deletes it (both idempotent on this object)."""

    def __init__(self, key: str, agent_port: int, kept: Sequence[int] = ()) -> None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        self.table = f"{TABLE_PREFIX}{agent_port}_{digest}"
        # Connections to these ports stay open both ways; the member's own
        # connections to its peers leave from other ports, and are dropped.
        self.ports = sorted({agent_port, SSH_PORT, *kept})
        self.active = False

    def apply(self) -> None:
        if self.active:
            return
        ports = ", ".join(str(p) for p in self.ports)
        # One transaction: the table appears with all its rules or not at all.
        _nft(["-f", "-"], _RULES.format(table=self.table, ports=ports))
        self.active = True

    def remove(self) -> None:
        if not self.active:
            return
        _nft(["delete", "table", "inet", self.table])
        self.active = False


class MemberIsolation:
    """A member's isolation of its host, when it has one: at most one table at
    a time, each told in the member's own ``log``. The member calls it with
    its lock held; ``who`` names the member in refusals, ``key`` its table."""

    def __init__(self, who: str, key: str, log: logging.Logger) -> None:
        self.who, self.key, self.log = who, key, log
        self._cut: Isolation | None = None

    @property
    def active(self) -> bool:
        return self._cut is not None

    def isolate(self, host: str, agent_port: int, kept: Sequence[int] = ()) -> None:
        """Cut the member on ``host`` off, all but ``agent_port`` and ``kept``;
        MemberError when it cannot be (and nothing changed)."""
        if is_loopback(host):
            # The table keeps loopback traffic: it would cut this machine
            # off from everyone else and the member from no one.
            raise MemberError(
                f"cannot isolate {self.who}: it listens on loopback ({host}), which an"
                " isolation keeps open; isolate needs members on hosts of their own"
            )
        if self._cut is not None:
            raise MemberError(f"cannot isolate {self.who}: it is isolated already")
        cut = Isolation(self.key, agent_port, kept)
        cut.apply()
        self._cut = cut
        self.log.info(
            "isolated (scheduled fault): nftables table inet %s drops all but"
            " loopback and tcp ports %s",
            cut.table,
            ", ".join(map(str, cut.ports)),
        )

    def heal(self) -> None:
        """Delete the table; MemberError when there is none, or when nft fails
        (and the table is still there)."""
        if self._cut is None:
            raise MemberError(f"cannot heal {self.who}: it is not isolated")
        self._cut.remove()
        self.log.info("healed (scheduled fault): table inet %s deleted", self._cut.table)
        self._cut = None

    def heal_on_stop(self) -> str:
        """Heal if isolated: a host is never left cut off after its member is
        gone. A failure is logged and returned ("" when none): the stop goes on."""
        if self._cut is None:
            return ""
        try:
            self.heal()
        except MemberError as exc:
            self.log.error("could not heal on stop: %s", exc)
            return f"the isolation outlived the member: {exc}"
        return ""


def sweep(agent_port: int) -> list[str]:
    """Delete the isolation tables an earlier agent on ``agent_port`` left (one
    killed outright cannot heal); the names deleted. Quiet when nft is missing
    or not allowed: then no table can have been made either."""
    prefix = f"{TABLE_PREFIX}{agent_port}_"
    try:
        listed = _nft(["list", "tables", "inet"]).stdout
    except MemberError as exc:
        log.debug("no isolation tables swept: %s", exc)
        return []
    removed = []
    for line in listed.splitlines():
        words = line.split()
        if len(words) == 3 and words[:2] == ["table", "inet"] and words[2].startswith(prefix):
            try:
                _nft(["delete", "table", "inet", words[2]])
            except MemberError as exc:
                log.warning("could not remove the leftover isolation table: %s", exc)
                continue
            removed.append(words[2])
    return removed
