"""dbtester's own calls to etcd (readiness, the leader, counting keys, the
maintenance events, the pre-fill), all through etcd's gRPC API on a channel
that speaks TLS and carries a user's token when the test case asks; and the
setup of a user on members dbtester starts."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import grpc

from dbtester.databases.base import Access, LoadSettings
from dbtester.proto import etcd_pb2 as pb
from dbtester.proto import etcd_pb2_grpc as rpc
from dbtester.util.keys import PREFIX

__all__ = ["REFUSED", "channel", "create_user", "status"]

#: the codes of a call etcd refused for its user (a wrong password is
#: INVALID_ARGUMENT "authentication failed")
REFUSED = frozenset({grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED})
#: the gRPC metadata etcd reads a call's auth token from
TOKEN_KEY = "token"
#: every key: from "\0" to the end ("\0" as a range's end means "no end")
ALL_KEYS = b"\x00"


@contextmanager
def channel(address: str, access: Access) -> Iterator[grpc.Channel]:
    """A channel to the member at ``address`` (host:port), closed on leaving;
    with a user, its calls carry the token it gets on the first one."""
    with _plain_or_tls(address, access) as raw:
        if not access.user:
            yield raw
            return
        yield grpc.intercept_channel(raw, _Token(raw, access))


@contextmanager
def _plain_or_tls(address: str, access: Access) -> Iterator[grpc.Channel]:
    if access.tls is None:
        with grpc.insecure_channel(address) as plain:
            yield plain
        return
    ca, cert, key = access.tls.pem()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )
    name = access.tls.server_name
    options = [("grpc.ssl_target_name_override", name)] if name else []
    with grpc.secure_channel(address, credentials, options) as secure:
        yield secure


def status(address: str, access: Access, timeout: float) -> pb.StatusResponse:
    """The member's Maintenance.Status: its id, the leader's, its database's size."""
    with channel(address, access) as open_channel:
        reply: pb.StatusResponse = rpc.MaintenanceStub(open_channel).Status(
            pb.StatusRequest(), timeout=timeout
        )
        return reply


def create_user(address: str, access: Access, timeout: float) -> None:
    """On a fresh cluster: ``root`` and ``access``'s user, both with the
    root role and the user's password, then authentication on (etcd
    enables it only once root exists with its role). grpc.RpcError when
    the cluster refuses."""
    anonymous = Access(tls=access.tls)
    with channel(address, anonymous) as open_channel:
        auth = rpc.AuthStub(open_channel)
        for user in dict.fromkeys(["root", access.user]):
            auth.UserAdd(pb.AuthUserAddRequest(name=user, password=access.secret), timeout=timeout)
            auth.UserGrantRole(pb.AuthUserGrantRoleRequest(user=user, role="root"), timeout=timeout)
        auth.AuthEnable(pb.AuthEnableRequest(), timeout=timeout)


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _CallDetails(_Details, grpc.ClientCallDetails):
    """What grpc's interceptors hand on: the call with its token added."""


class _Token(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Authenticates once, on the channel's first call (a wrong password
    fails that call with etcd's reason), and adds the token to every call."""

    def __init__(self, raw: grpc.Channel, access: Access) -> None:
        self._raw, self._access = raw, access
        self._token: str | None = None
        self._lock = threading.Lock()

    def _with_token(self, details: grpc.ClientCallDetails) -> _CallDetails:
        with self._lock:
            if self._token is None:
                request = pb.AuthenticateRequest(
                    name=self._access.user, password=self._access.secret
                )
                reply = rpc.AuthStub(self._raw).Authenticate(request, timeout=details.timeout)
                self._token = reply.token
        metadata = [*(details.metadata or ()), (TOKEN_KEY, self._token)]
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)


def count_keys(settings: LoadSettings, kind: str, prefix: bytes = PREFIX) -> int:
    """How many keys ``prefix`` holds (one count-only range);
    PermissionError when ``kind``'s server refuses the user."""
    request = pb.RangeRequest(key=prefix, range_end=_prefix_end(prefix), count_only=True)
    with channel(settings.endpoints[0], settings.access) as open_channel:
        try:
            return int(
                rpc.KVStub(open_channel).Range(request, timeout=max(settings.timeout_s, 60)).count
            )
        except grpc.RpcError as exc:
            if exc.code() in REFUSED or "authentication failed" in (exc.details() or ""):
                raise PermissionError(f"{kind} refused the key count: {exc.details()}") from None
            raise


def _prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])
