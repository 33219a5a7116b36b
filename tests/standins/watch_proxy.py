"""gRPC proxies in front of a real etcd that each spoil one watch, so that
everything else the engine does is answered by etcd itself.

``DroppingProxy`` drops the first delete event any Watch stream carries:

    with DroppingProxy(etcd_endpoint) as proxy:
        ... proxy.endpoint ...  # "127.0.0.1:PORT"
        proxy.dropped          # the event's (key, mod_revision), once dropped

Names are never reused by a Kubernetes load, so an informer that misses a
delete keeps that object to the end, where its copy is compared with a
fresh list: the check must then name the object.

``StallingProxy`` holds the first Watch stream that carries an event: it
passes that reply, then nothing more for ``hold_s`` seconds, then ends the
stream as a dropped connection would (UNAVAILABLE). A watcher that
resumes from one past the last revision it saw then finds that revision
compacted away, if the database compacted meanwhile: an informer lists again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from types import TracebackType
from typing import Any, Self

import grpc

from dbtester.proto import etcd_pb2 as pb

__all__ = ["DroppingProxy", "StallingProxy", "WatchProxy"]

WATCH = "/etcdserverpb.Watch/Watch"


class WatchProxy(grpc.GenericRpcHandler):
    """Forwards every unary call and the Watch stream to ``upstream``; a
    subclass spoils the stream (``_passed``, ``_holds``)."""

    def __init__(self, upstream: str) -> None:
        self._channel = grpc.insecure_channel(upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        self._server.add_generic_rpc_handlers((self,))
        self._port = self._server.add_insecure_port("127.0.0.1:0")
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self._port}"

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.stop(grace=None).wait()
        self._channel.close()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = details.method
        if method == WATCH:
            return grpc.stream_stream_rpc_method_handler(self._watch)
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    def _unary(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.unary_unary(method)

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            # without a deadline the context's time remaining is a huge
            # number that the channel's own clock overflows on
            left = context.time_remaining()
            try:
                reply: bytes = call(request, timeout=left if left < 1e6 else None)
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or "")
            return reply

        return forward

    def _watch(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        watch: grpc.StreamStreamMultiCallable[bytes, bytes] = self._channel.stream_stream(WATCH)
        call = watch(requests)

        def cancel() -> None:
            call.cancel()

        context.add_callback(cancel)
        try:
            for raw in call:
                yield self._passed(raw)
                if (hold_s := self._holds(raw)) is not None:
                    time.sleep(hold_s)
                    call.cancel()
                    context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy stalled this watch")
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                context.abort(exc.code(), exc.details() or "")

    def _passed(self, raw: bytes) -> bytes:
        """What the watcher gets of the reply ``raw``."""
        return raw

    def _holds(self, raw: bytes) -> float | None:
        """Seconds to hold the stream after ``raw``, then end it (None: go on)."""
        return None


class DroppingProxy(WatchProxy):
    """Drops the first delete event any Watch stream carries (``dropped``:
    its key and mod_revision)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.dropped: tuple[str, int] | None = None

    def _passed(self, raw: bytes) -> bytes:
        with self._lock:
            if self.dropped is not None:
                return raw
            reply = pb.WatchResponse.FromString(raw)
            for i, event in enumerate(reply.events):
                if event.type == pb.Event.DELETE:
                    self.dropped = (event.kv.key.decode(), event.kv.mod_revision)
                    del reply.events[i]
                    return reply.SerializeToString()
            return raw


class StallingProxy(WatchProxy):
    """Holds, then ends, the first Watch stream that carries an event
    (``stalled``: the revision of the last event it passed)."""

    def __init__(self, upstream: str, hold_s: float) -> None:
        super().__init__(upstream)
        self._hold_s = hold_s
        self.stalled: int | None = None

    def _holds(self, raw: bytes) -> float | None:
        with self._lock:
            if self.stalled is not None:
                return None
            reply = pb.WatchResponse.FromString(raw)
            if not reply.events:
                return None
            self.stalled = reply.events[-1].kv.mod_revision
            return self._hold_s
