"""Authentication for every agent call, the health service's included.

With a token, each call must carry ``authorization: Bearer <token>`` metadata;
without one, only loopback peers are served. Either way a refused call gets
UNAUTHENTICATED before any handler runs. The token is compared in constant
time and never logged.
"""

from __future__ import annotations

import hmac
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

import grpc

__all__ = ["AuthInterceptor", "is_loopback_peer"]

log = logging.getLogger(__name__)


def is_loopback_peer(peer: str) -> bool:
    """``context.peer()`` strings: 'ipv4:127.0.0.1:5000', 'ipv6:[::1]:5000' (or
    percent-encoded, 'ipv6:%5B::1%5D:5000'), 'unix:...'."""
    peer = urllib.parse.unquote(peer)
    if peer.startswith("ipv4:"):
        return peer[5:].startswith("127.")
    if peer.startswith("ipv6:"):
        host = peer[5:].rsplit(":", 1)[0].strip("[]")
        return host == "::1" or host.startswith("::ffff:127.")
    return peer.startswith("unix:")


class AuthInterceptor(grpc.ServerInterceptor):
    """Refuses unauthenticated calls; ``on_accepted`` runs for every accepted one
    (the agent's heartbeat watchdog)."""

    def __init__(self, token: str | None, on_accepted: Callable[[], None]) -> None:
        self._expected = f"Bearer {token}".encode() if token else None
        self._on_accepted = on_accepted

    def _refusal(self, metadata: dict[str, str], peer: str) -> str | None:
        if self._expected is None:
            if is_loopback_peer(peer):
                return None
            return "this agent has no token file and serves loopback clients only"
        given = metadata.get("authorization", "").encode()
        if not given:
            return "missing 'authorization: Bearer <token>' metadata"
        if not hmac.compare_digest(given, self._expected):
            return "wrong token"
        return None

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        metadata = {k: str(v) for k, v in handler_call_details.invocation_metadata or ()}
        method = handler_call_details.method

        def guard(behaviour: Callable[..., Any]) -> Callable[..., Any]:
            def checked(request: Any, context: grpc.ServicerContext) -> Any:
                reason = self._refusal(metadata, context.peer())
                if reason is not None:
                    log.warning("refused %s from %s: %s", method, context.peer(), reason)
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
                self._on_accepted()
                return behaviour(request, context)

            return checked

        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                guard(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                guard(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # the agent has no client-streaming methods
