"""Consul's maintenance events, through its HTTP API as the consul command
calls it: a snapshot (GET /v1/snapshot, streamed and counted, not kept) and
a leader transfer (POST /v1/operator/raft/transfer-leader, Consul 1.15 on).
Consul compacts its Raft log itself (it snapshots its state and truncates
the log on its own thresholds) and its store is in memory: there is no
compaction or defragmentation to ask for."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from dbtester.databases.base import EventCall, EventFailed, size_text, transfer_ends

__all__ = ["NOTES", "run"]

NOTES = {
    "compact": "Consul truncates its Raft log by itself after its own snapshots",
    "defrag": "Consul keeps its state in memory: there is no file to defragment",
}
_CHUNK = 1 << 16


def _open(request: urllib.request.Request | str, what: str, timeout: float) -> Any:
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace").strip()
        raise EventFailed(f"{what}: HTTP {exc.code} {body or exc.reason}") from None
    except OSError as exc:
        raise EventFailed(f"{what}: {exc}") from None


def snapshot(call: EventCall) -> str:
    """The member's own snapshot (``stale``: a follower answers from its state
    instead of forwarding to the leader), its bytes counted."""
    (member,) = call.members
    stale = "" if member == call.leader else "?stale"
    url = f"{call.peers[member].url('client')}/v1/snapshot{stale}"
    received = 0
    with _open(url, f"snapshot of member {member}", call.timeout_s) as reply:
        while chunk := reply.read(_CHUNK):
            received += len(chunk)
    return f"{size_text(received)} from member {member}"


def transfer_leader(call: EventCall) -> str:
    """The new leader named by its Raft server id, from the Raft configuration."""
    leader, target = transfer_ends(call)
    base = call.peers[leader].url("client")
    with _open(f"{base}/v1/operator/raft/configuration", "raft configuration", 10.0) as reply:
        servers = json.loads(reply.read()).get("Servers", [])
    name = call.peers[target].name
    ids = [s.get("ID") for s in servers if s.get("Node") == name]
    if not ids:
        raise EventFailed(f"member {target} ({name}) is not in the Raft configuration")
    request = urllib.request.Request(
        f"{base}/v1/operator/raft/transfer-leader?id={ids[0]}", data=b"", method="POST"
    )
    with _open(request, "transfer leader", call.timeout_s) as reply:
        reply.read()
    return f"member {leader} to member {target}"


_RUN: dict[str, Callable[[EventCall], str]] = {
    "snapshot": snapshot,
    "transfer_leader": transfer_leader,
}


def run(event: str, call: EventCall) -> str:
    return _RUN[event](call)
