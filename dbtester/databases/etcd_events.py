"""etcd's maintenance events, through its own gRPC API as etcdctl calls it:
compaction (KV.Compact, physical: it returns once the backend has done it),
defragmentation (Maintenance.Defragment, one member at a time), a snapshot
(Maintenance.Snapshot, streamed and counted, not kept) and a leader transfer
(Maintenance.MoveLeader, asked of the leader); and the pre-fill that gives
them data to work on (KV.Txn, as many puts to a transaction as etcd allows
by default)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import grpc

from dbtester.databases.base import (
    EventCall,
    EventFailed,
    LoadSettings,
    size_text,
    transfer_ends,
)
from dbtester.databases.etcd_client import channel
from dbtester.databases.etcd_client import status as status_of
from dbtester.errors import DbtesterError
from dbtester.proto import etcd_pb2 as pb
from dbtester.proto import etcd_pb2_grpc as rpc
from dbtester.util.keys import prefill_batches, prefill_key

__all__ = ["prefill", "run"]

#: etcd's default --max-txn-ops
TXN_OPS = 128
#: transactions in flight at once while pre-filling
PREFILL_THREADS = 4
#: single puts in flight at once while pre-filling without transactions
PUT_THREADS = 8


def _called(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except grpc.RpcError as exc:
        code = exc.code().name if exc.code() is not None else "ERROR"
        raise EventFailed(f"{what}: {code} {exc.details() or ''}".rstrip()) from None


def _status(call: EventCall, member: int) -> pb.StatusResponse:
    """Member ``member``'s status (its id, size, the revision)."""
    address = call.peers[member].address("client")
    reply: pb.StatusResponse = _called(
        "status", lambda: status_of(address, call.access, call.timeout_s)
    )
    return reply


def _open(call: EventCall, member: int) -> AbstractContextManager[grpc.Channel]:
    return channel(call.peers[member].address("client"), call.access)


def compact(call: EventCall) -> str:
    """To the current revision less ``keep_revisions``, asked of the first
    member that answers."""
    member = call.leader if call.leader is not None else 0
    status = _status(call, member)
    revision = status.header.revision - call.keep_revisions
    if revision < 1:
        raise EventFailed(f"the revision is {status.header.revision}: nothing to compact")
    before = _sizes(status)
    with _open(call, member) as open_channel:
        request = pb.CompactionRequest(revision=revision, physical=True)
        _called(
            "compact", lambda: rpc.KVStub(open_channel).Compact(request, timeout=call.timeout_s)
        )
    after = _sizes(_status(call, member))
    return f"to revision {revision:,}; {before} before, {after} after"


def _sizes(status: pb.StatusResponse) -> str:
    """The member's database: in use of its file's size (etcd 3.4 on says both)."""
    return f"{size_text(status.dbSizeInUse)} in use of {size_text(status.dbSize)}"


def defrag(call: EventCall) -> str:
    """Each member in turn, as operators do; its database size before and after."""
    return "; ".join(_defrag_one(call, member) for member in call.members)


def _defrag_one(call: EventCall, member: int) -> str:
    def defragment() -> None:
        with _open(call, member) as open_channel:
            rpc.MaintenanceStub(open_channel).Defragment(
                pb.DefragmentRequest(), timeout=call.timeout_s
            )

    before = _status(call, member).dbSize
    _called(f"defragment member {member}", defragment)
    after = _status(call, member).dbSize
    return f"member {member} {size_text(before)} to {size_text(after)}"


def snapshot(call: EventCall) -> str:
    """The member's whole snapshot streamed to us, its bytes counted."""
    (member,) = call.members
    received = 0
    with _open(call, member) as open_channel:
        stream = rpc.MaintenanceStub(open_channel).Snapshot(
            pb.SnapshotRequest(), timeout=call.timeout_s
        )

        def drain() -> int:
            return sum(len(part.blob) for part in stream)

        received = _called(f"snapshot of member {member}", drain)
    return f"{size_text(received)} from member {member}"


def transfer_leader(call: EventCall) -> str:
    """MoveLeader asked of the leader, naming the new one by its member id."""
    leader, target = transfer_ends(call)
    new_id = _status(call, target).header
    with _open(call, leader) as open_channel:
        request = pb.MoveLeaderRequest(targetID=new_id.member_id)
        _called(
            "move leader",
            lambda: rpc.MaintenanceStub(open_channel).MoveLeader(request, timeout=call.timeout_s),
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
    settings: LoadSettings,
    count: int,
    value_size: int,
    advance: Callable[[int], None],
    *,
    transactions: bool = True,
) -> None:
    """``count`` keys in transactions of TXN_OPS puts, PREFILL_THREADS at
    once; without ``transactions`` (kine takes no multi-put transaction),
    one put per key, PUT_THREADS at once."""
    value = b"v" * value_size
    timeout = max(settings.timeout_s, 30.0)
    with channel(settings.endpoints[0], settings.access) as open_channel:
        stub = rpc.KVStub(open_channel)

        def write(batch: range) -> int:
            puts = [pb.PutRequest(key=prefill_key(n).encode(), value=value) for n in batch]
            try:
                if transactions:
                    ops = [pb.RequestOp(request_put=put) for put in puts]
                    stub.Txn(pb.TxnRequest(success=ops), timeout=timeout)
                else:
                    (put,) = puts
                    stub.Put(put, timeout=timeout)
            except grpc.RpcError as exc:
                raise DbtesterError(f"the pre-fill failed: {exc.code()} {exc.details()}") from None
            return len(batch)

        most, threads = (TXN_OPS, PREFILL_THREADS) if transactions else (1, PUT_THREADS)
        with ThreadPoolExecutor(threads, thread_name_prefix="prefill") as pool:
            for written in pool.map(write, prefill_batches(count, value_size, most)):
                advance(written)
