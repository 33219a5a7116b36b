"""A gRPC proxy in front of a real etcd that drops one watch event: the
first delete event any Watch stream carries. Every other call, and every
other event, passes through unchanged, so everything the engine does is
answered by etcd itself.

    with DroppingProxy(etcd_endpoint) as proxy:
        ... proxy.endpoint ...  # "127.0.0.1:PORT"
        proxy.dropped          # the event's (key, mod_revision), once dropped

Names are never reused by a Kubernetes load, so an informer that misses a
delete keeps that object to the end, where its copy is compared with a
fresh list: the check must then name the object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from types import TracebackType
from typing import Any

import grpc

from dbtester.proto import etcd_pb2 as pb

__all__ = ["DroppingProxy"]

WATCH = "/etcdserverpb.Watch/Watch"


class DroppingProxy(grpc.GenericRpcHandler):
    """Forwards every unary call and the Watch stream to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self._channel = grpc.insecure_channel(upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        self._server.add_generic_rpc_handlers((self,))
        self._port = self._server.add_insecure_port("127.0.0.1:0")
        self._lock = threading.Lock()
        self.dropped: tuple[str, int] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self._port}"

    def __enter__(self) -> DroppingProxy:
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
                yield self._without_one_delete(raw)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                context.abort(exc.code(), exc.details() or "")

    def _without_one_delete(self, raw: bytes) -> bytes:
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
