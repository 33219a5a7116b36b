"""Consul's maintenance events, through its HTTP API as the consul command
calls it: a snapshot (GET /v1/snapshot, streamed and counted, not kept) and
a leader transfer (POST /v1/operator/raft/transfer-leader, Consul 1.15 on);
and the pre-fill that gives them data to work on (PUT /v1/txn, 64 sets to
a transaction, Consul's limit).
Consul compacts its Raft log itself (it snapshots its state and truncates
the log on its own thresholds) and its store is in memory: there is no
compaction or defragmentation to ask for."""

from __future__ import annotations

import base64
import json
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dbtester.databases.base import (
    Access,
    EventCall,
    EventFailed,
    LoadSettings,
    size_text,
    transfer_ends,
)
from dbtester.databases.consul_client import open_url
from dbtester.errors import DbtesterError
from dbtester.util.keys import prefill_batches, prefill_key

__all__ = ["NOTES", "prefill", "run"]

#: Consul's most operations in one transaction
TXN_OPS = 64
#: transactions in flight at once while pre-filling
PREFILL_THREADS = 4

NOTES = {
    "compact": "Consul truncates its Raft log by itself after its own snapshots",
    "defrag": "Consul keeps its state in memory: there is no file to defragment",
}
_CHUNK = 1 << 16


def _open(
    address: str,
    path: str,
    access: Access,
    what: str,
    timeout: float,
    *,
    method: str = "GET",
    data: bytes | None = None,
) -> Any:
    try:
        return open_url(address, path, access, timeout, method=method, data=data)
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
    address = call.peers[member].address("client")
    received = 0
    what = f"snapshot of member {member}"
    with _open(address, f"/v1/snapshot{stale}", call.access, what, call.timeout_s) as reply:
        while chunk := reply.read(_CHUNK):
            received += len(chunk)
    return f"{size_text(received)} from member {member}"


def transfer_leader(call: EventCall) -> str:
    """The new leader named by its Raft server id, from the Raft configuration."""
    leader, target = transfer_ends(call)
    address = call.peers[leader].address("client")
    configuration = "/v1/operator/raft/configuration"
    with _open(address, configuration, call.access, "raft configuration", 10.0) as reply:
        servers = json.loads(reply.read()).get("Servers", [])
    name = call.peers[target].name
    ids = [s.get("ID") for s in servers if s.get("Node") == name]
    if not ids:
        raise EventFailed(f"member {target} ({name}) is not in the Raft configuration")
    transfer = f"/v1/operator/raft/transfer-leader?id={ids[0]}"
    with _open(
        address, transfer, call.access, "transfer leader", call.timeout_s, method="POST", data=b""
    ) as reply:
        reply.read()
    return f"member {leader} to member {target}"


_RUN: dict[str, Callable[[EventCall], str]] = {
    "snapshot": snapshot,
    "transfer_leader": transfer_leader,
}


def run(event: str, call: EventCall) -> str:
    return _RUN[event](call)


def prefill(
    settings: LoadSettings,
    root: str,
    count: int,
    value_size: int,
    advance: Callable[[int], None],
) -> None:
    """``count`` keys under ``root`` in transactions of TXN_OPS sets,
    PREFILL_THREADS at once."""
    value = base64.b64encode(b"v" * value_size).decode()
    timeout = max(settings.timeout_s, 30.0)

    def write(batch: range) -> int:
        ops = [
            {"KV": {"Verb": "set", "Key": f"{root}/{prefill_key(n)}", "Value": value}}
            for n in batch
        ]
        body = json.dumps(ops).encode()
        try:
            with _open(
                settings.endpoints[0],
                "/v1/txn",
                settings.access,
                "the pre-fill",
                timeout,
                method="PUT",
                data=body,
            ) as reply:
                reply.read()
        except EventFailed as exc:
            raise DbtesterError(str(exc)) from None
        return len(batch)

    with ThreadPoolExecutor(PREFILL_THREADS, thread_name_prefix="prefill") as pool:
        for written in pool.map(write, prefill_batches(count, value_size, TXN_OPS)):
            advance(written)
