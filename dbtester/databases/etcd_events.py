"""etcd's maintenance events, through its own gRPC API as etcdctl calls it:
compaction (KV.Compact, physical: it returns once the backend has done it),
defragmentation (Maintenance.Defragment, one member at a time), a snapshot
(Maintenance.Snapshot, streamed and counted, not kept) and a leader transfer
(Maintenance.MoveLeader, asked of the leader); and the pre-fill that gives
them data to work on (KV.Txn, as many puts to a transaction as etcd allows
by default)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc

from dbtester.databases.base import (
    EventCall,
    EventFailed,
    LoadSettings,
    Peer,
    size_text,
    transfer_ends,
)
from dbtester.errors import DbtesterError
from dbtester.proto import etcd_pb2 as pb
from dbtester.proto import etcd_pb2_grpc as rpc
from dbtester.util.keys import prefill_batches, prefill_key

__all__ = ["prefill", "run"]

#: etcd's default --max-txn-ops
TXN_OPS = 128
#: transactions in flight at once while pre-filling
PREFILL_THREADS = 4


@contextmanager
def _channel(peer: Peer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(peer.address("client")) as channel:
        yield channel


def _status(peer: Peer, timeout: float) -> pb.StatusResponse:
    with _channel(peer) as channel:
        reply: pb.StatusResponse = rpc.MaintenanceStub(channel).Status(
            pb.StatusRequest(), timeout=timeout
        )
        return reply


def _called(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except grpc.RpcError as exc:
        code = exc.code().name if exc.code() is not None else "ERROR"
        raise EventFailed(f"{what}: {code} {exc.details() or ''}".rstrip()) from None


def compact(call: EventCall) -> str:
    """To the current revision less ``keep_revisions``, asked of the first
    member that answers."""
    peer = call.peers[call.leader if call.leader is not None else 0]
    status = _called("status", lambda: _status(peer, call.timeout_s))
    revision = status.header.revision - call.keep_revisions
    if revision < 1:
        raise EventFailed(f"the revision is {status.header.revision}: nothing to compact")
    before = _sizes(status)
    with _channel(peer) as channel:
        request = pb.CompactionRequest(revision=revision, physical=True)
        _called("compact", lambda: rpc.KVStub(channel).Compact(request, timeout=call.timeout_s))
    after = _sizes(_called("status", lambda: _status(peer, call.timeout_s)))
    return f"to revision {revision:,}; {before} before, {after} after"


def _sizes(status: pb.StatusResponse) -> str:
    """The member's database: in use of its file's size (etcd 3.4 on says both)."""
    return f"{size_text(status.dbSizeInUse)} in use of {size_text(status.dbSize)}"


def defrag(call: EventCall) -> str:
    """Each member in turn, as operators do; its database size before and after."""
    return "; ".join(_defrag_one(call, member) for member in call.members)


def _defrag_one(call: EventCall, member: int) -> str:
    peer = call.peers[member]

    def size() -> int:
        return int(_status(peer, call.timeout_s).dbSize)

    def defragment() -> None:
        with _channel(peer) as channel:
            rpc.MaintenanceStub(channel).Defragment(pb.DefragmentRequest(), timeout=call.timeout_s)

    before = _called("status", size)
    _called(f"defragment member {member}", defragment)
    after = _called("status", size)
    return f"member {member} {size_text(before)} to {size_text(after)}"


def snapshot(call: EventCall) -> str:
    """The member's whole snapshot streamed to us, its bytes counted."""
    (member,) = call.members
    received = 0
    with _channel(call.peers[member]) as channel:
        stream = rpc.MaintenanceStub(channel).Snapshot(pb.SnapshotRequest(), timeout=call.timeout_s)

        def drain() -> int:
            return sum(len(part.blob) for part in stream)

        received = _called(f"snapshot of member {member}", drain)
    return f"{size_text(received)} from member {member}"


def transfer_leader(call: EventCall) -> str:
    """MoveLeader asked of the leader, naming the new one by its member id."""
    leader, target = transfer_ends(call)
    new_id = _called("status", lambda: _status(call.peers[target], call.timeout_s)).header
    with _channel(call.peers[leader]) as channel:
        request = pb.MoveLeaderRequest(targetID=new_id.member_id)
        _called(
            "move leader",
            lambda: rpc.MaintenanceStub(channel).MoveLeader(request, timeout=call.timeout_s),
        )
    return f"member {leader} to member {target}"


_RUN: dict[str, Callable[[EventCall], str]] = {
    "compact": compact,
    "defrag": defrag,
    "snapshot": snapshot,
    "transfer_leader": transfer_leader,
}


def run(event: str, call: EventCall) -> str:
    return _RUN[event](call)


def prefill(
    settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
) -> None:
    """``count`` keys in transactions of TXN_OPS puts, PREFILL_THREADS at once."""
    value = b"v" * value_size
    timeout = max(settings.timeout_s, 30.0)
    with grpc.insecure_channel(settings.endpoints[0]) as channel:
        stub = rpc.KVStub(channel)

        def write(batch: range) -> int:
            puts = [
                pb.RequestOp(request_put=pb.PutRequest(key=prefill_key(n).encode(), value=value))
                for n in batch
            ]
            try:
                stub.Txn(pb.TxnRequest(success=puts), timeout=timeout)
            except grpc.RpcError as exc:
                raise DbtesterError(f"the pre-fill failed: {exc.code()} {exc.details()}") from None
            return len(batch)

        with ThreadPoolExecutor(PREFILL_THREADS, thread_name_prefix="prefill") as pool:
            for written in pool.map(write, prefill_batches(count, value_size, TXN_OPS)):
                advance(written)
