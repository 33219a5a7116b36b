"""An etcd stand-in: KV (Range, Put, Txn), Watch and Maintenance.Status over
gRPC on loopback, with one revision counter as etcd has, and switches to
misbehave. The mixed-workload, watch and correctness tests share it.

    with EtcdStandIn(Misbehave(wrong_value=0.1)) as etcd:
        ... etcd.endpoint ...  # "127.0.0.1:PORT"

Only what dbtester's engine and tests use is served: single keys and
prefixes (range_end), compares on mod_revision, version or value, puts and
ranges in a Txn, watches from now on.
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from types import TracebackType

import grpc

from dbtester.proto import etcd_pb2 as pb
from dbtester.proto import etcd_pb2_grpc as rpc

__all__ = ["EtcdStandIn", "Misbehave"]

MEMBER_ID = 1


@dataclass(frozen=True)
class Misbehave:
    """What the stand-in gets wrong (shares are of the requests concerned)."""

    #: reads answered with another key's value
    wrong_value: float = 0.0
    #: reads answered with the key's first value, whatever was written since
    stale: bool = False
    #: puts acknowledged but not stored
    lose_writes: float = 0.0
    #: each watch response's events sent in reverse order
    reorder_events: bool = False
    #: events never sent to watchers
    drop_events: float = 0.0
    #: events sent to a watcher twice
    duplicate_events: float = 0.0
    #: the first watch created is cancelled (its history compacted, so it
    #: cannot resume) once it was sent this many events; 0: never
    cancel_watch_after: int = 0
    #: every Watch stream ends (the member went away) once it sent this many
    #: events; 0: never
    end_streams_after: int = 0
    #: every second put takes the revision of the put before (as two puts of
    #: one transaction do), and each goes to watchers in a response of its
    #: own: that revision split across two responses
    split_revisions: bool = False


@dataclass
class _Entry:
    kv: pb.KeyValue
    first: bytes


@dataclass
class _Watcher:
    key: bytes
    range_end: bytes
    watch_id: int
    out: queue.Queue[pb.WatchResponse | None] = field(default_factory=queue.Queue)
    #: events queued for it so far
    sent: int = 0

    def wants(self, key: bytes) -> bool:
        if not self.range_end:
            return key == self.key
        return self.key <= key and (self.range_end == b"\0" or key < self.range_end)


class EtcdStandIn(rpc.KVServicer, rpc.WatchServicer, rpc.MaintenanceServicer):
    def __init__(self, misbehave: Misbehave | None = None, seed: int = 1) -> None:
        self.misbehave = misbehave or Misbehave()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._store: dict[bytes, _Entry] = {}
        self._revision = 1
        self._watchers: list[_Watcher] = []
        self._next_watch = 1
        #: every put, in revision order: what a watch from a past revision replays
        self._history: list[pb.KeyValue] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        rpc.add_KVServicer_to_server(self, self._server)
        rpc.add_WatchServicer_to_server(self, self._server)
        rpc.add_MaintenanceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        #: what the stand-in did wrong so far, by switch
        self.misdeeds: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> EtcdStandIn:
        self._server.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with self._lock:
            for watcher in self._watchers:
                watcher.out.put(None)
        self._server.stop(grace=None).wait()

    def value(self, key: bytes) -> bytes | None:
        """What the stand-in holds for ``key`` (None: nothing)."""
        with self._lock:
            entry = self._store.get(key)
            return entry.kv.value if entry else None

    # ------------------------------------------------------------ KV

    def Range(self, request: pb.RangeRequest, context: grpc.ServicerContext) -> pb.RangeResponse:  # noqa: N802
        with self._lock:
            return self._range(request)

    def Put(self, request: pb.PutRequest, context: grpc.ServicerContext) -> pb.PutResponse:  # noqa: N802
        with self._lock:
            return self._put(request)

    def Txn(self, request: pb.TxnRequest, context: grpc.ServicerContext) -> pb.TxnResponse:  # noqa: N802
        with self._lock:
            succeeded = all(self._holds(c) for c in request.compare)
            responses = []
            for op in request.success if succeeded else request.failure:
                if op.HasField("request_put"):
                    responses.append(pb.ResponseOp(response_put=self._put(op.request_put)))
                else:
                    responses.append(pb.ResponseOp(response_range=self._range(op.request_range)))
            return pb.TxnResponse(header=self._header(), succeeded=succeeded, responses=responses)

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusResponse:  # noqa: N802
        return pb.StatusResponse(header=self._header(), version="stand-in", leader=MEMBER_ID)

    def _header(self) -> pb.ResponseHeader:
        return pb.ResponseHeader(cluster_id=1, member_id=MEMBER_ID, revision=self._revision)

    def _range(self, request: pb.RangeRequest) -> pb.RangeResponse:
        found = [
            self._read(key, entry)
            for key, entry in sorted(self._store.items())
            if _Watcher(request.key, request.range_end, 0).wants(key)
        ]
        if request.count_only:
            return pb.RangeResponse(header=self._header(), count=len(found))
        return pb.RangeResponse(header=self._header(), kvs=found, count=len(found))

    def _read(self, key: bytes, entry: _Entry) -> pb.KeyValue:
        kv = pb.KeyValue()
        kv.CopyFrom(entry.kv)
        m = self.misbehave
        others = [k for k in self._store if k != key]
        if others and self._random.random() < m.wrong_value:
            kv.value = self._store[self._random.choice(others)].kv.value
            self._did("wrong_value")
        elif m.stale and entry.first != kv.value:
            kv.value = entry.first
            self._did("stale")
        return kv

    def _put(self, request: pb.PutRequest) -> pb.PutResponse:
        if self._random.random() < self.misbehave.lose_writes:
            self._did("lose_writes")
            return pb.PutResponse(header=self._header())
        shared = self.misbehave.split_revisions and len(self._history) % 2 == 1
        self._revision += 0 if shared else 1
        entry = self._store.get(request.key)
        kv = pb.KeyValue(
            key=request.key,
            value=request.value,
            create_revision=entry.kv.create_revision if entry else self._revision,
            mod_revision=self._revision,
            version=entry.kv.version + 1 if entry else 1,
        )
        self._store[request.key] = _Entry(kv, entry.first if entry else request.value)
        self._history.append(kv)
        self._notify(kv, split=shared)
        return pb.PutResponse(header=self._header())

    def _holds(self, compare: pb.Compare) -> bool:
        entry = self._store.get(compare.key)
        target = compare.WhichOneof("target_union")
        have: int | bytes
        if target == "mod_revision":
            have = entry.kv.mod_revision if entry else 0
        elif target == "version":
            have = entry.kv.version if entry else 0
        elif target == "create_revision":
            have = entry.kv.create_revision if entry else 0
        else:
            have = entry.kv.value if entry else b""
        want = getattr(compare, target or "mod_revision")
        equal = have == want
        return equal if compare.result == pb.Compare.EQUAL else not equal

    def _did(self, switch: str) -> None:
        self.misdeeds[switch] = self.misdeeds.get(switch, 0) + 1

    # ------------------------------------------------------------ Watch

    def _notify(self, kv: pb.KeyValue, split: bool = False) -> None:
        for watcher in list(self._watchers):
            if not watcher.wants(kv.key):
                continue
            if self._random.random() < self.misbehave.drop_events:
                self._did("drop_events")
                continue
            self._send(watcher, kv)
            if split:
                self._did("split_revisions")
            if self._random.random() < self.misbehave.duplicate_events:
                self._did("duplicate_events")
                self._send(watcher, kv)

    def _send(self, watcher: _Watcher, kv: pb.KeyValue) -> None:
        event = pb.Event(type=pb.Event.PUT, kv=kv)
        watcher.out.put(
            pb.WatchResponse(header=self._header(), watch_id=watcher.watch_id, events=[event])
        )
        watcher.sent += 1
        cancel_after = self.misbehave.cancel_watch_after
        if cancel_after and watcher.watch_id == 1 and watcher.sent == cancel_after:
            self._did("cancel_watch_after")
            self._watchers.remove(watcher)
            watcher.out.put(
                pb.WatchResponse(
                    header=self._header(),
                    watch_id=watcher.watch_id,
                    canceled=True,
                    compact_revision=self._revision,
                    cancel_reason="mvcc: required revision has been compacted",
                )
            )

    def Watch(  # noqa: N802
        self, requests: Iterator[pb.WatchRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.WatchResponse]:
        out: queue.Queue[pb.WatchResponse | None] = queue.Queue()
        mine: list[_Watcher] = []

        def read() -> None:
            try:
                for request in requests:
                    if request.HasField("create_request"):
                        with self._lock:
                            mine.append(self._create(request.create_request, out))
            except grpc.RpcError:
                return  # the client cancelled the call, or the stream ended
            # The client closed its side: its watches go on until it leaves.

        threading.Thread(target=read, daemon=True).start()
        # The RPC ended (the client left, or its deadline passed): stop sending.
        context.add_callback(lambda: out.put(None))
        try:
            yield from self._batches(out)
        finally:
            with self._lock:
                self._watchers = [w for w in self._watchers if w not in mine]

    def _create(
        self, create: pb.WatchCreateRequest, out: queue.Queue[pb.WatchResponse | None]
    ) -> _Watcher:
        """A watch, answered as created, then sent the history from its start
        revision (none without one): under the lock, so no put falls between."""
        watcher = _Watcher(create.key, create.range_end, self._next_watch, out)
        self._next_watch += 1
        self._watchers.append(watcher)
        out.put(pb.WatchResponse(header=self._header(), watch_id=watcher.watch_id, created=True))
        if create.start_revision:
            for kv in self._history:
                if kv.mod_revision >= create.start_revision and watcher.wants(kv.key):
                    self._send(watcher, kv)
        return watcher

    def _batches(self, out: queue.Queue[pb.WatchResponse | None]) -> Iterator[pb.WatchResponse]:
        """Responses as they come; with reorder_events, the events of one
        watcher waiting at once go in one response, newest first; with
        end_streams_after, the stream ends once it sent that many events."""
        held: list[pb.WatchResponse | None] = []
        events_sent = 0
        end_after = self.misbehave.end_streams_after
        while True:
            first = held.pop() if held else out.get()
            if first is None:
                return
            batch = [first]
            while self.misbehave.reorder_events and not first.created and not out.empty():
                nxt = out.get()
                if nxt is None or nxt.created or nxt.canceled or nxt.watch_id != first.watch_id:
                    held.append(nxt)
                    break
                batch.append(nxt)
            if end_after and events_sent >= end_after and first.events:
                self._did("end_streams_after")
                return
            events_sent += len(first.events) if len(batch) == 1 else 0
            if len(batch) == 1:
                yield first
                continue
            # counted per event: each after the newest arrives out of order
            for _ in batch[1:]:
                self._did("reorder_events")
            events = [e for response in batch for e in response.events][::-1]
            events_sent += len(events)
            yield pb.WatchResponse(header=batch[-1].header, watch_id=first.watch_id, events=events)
