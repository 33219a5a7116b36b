"""A gRPC proxy in front of a real etcd that breaks etcd's lock recipe: every
Range that asks for the key created last before a revision (the recipe's
question "who is ahead of me?", a Range with ``max_create_revision``) is
answered with no key, so every contender believes it holds the lock at
once. Everything else, that Range's header included, is etcd's own answer.

    with BlindingProxy(etcd_endpoint) as proxy:
        ... proxy.endpoint ...  # "127.0.0.1:PORT"
        proxy.blinded           # how many Ranges it emptied
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf.unknown_fields import UnknownFieldSet

from dbtester.proto import etcd_pb2 as pb
from tests.standins.watch_proxy import WatchProxy

__all__ = ["BlindingProxy"]

RANGE = "/etcdserverpb.KV/Range"
#: RangeRequest's max_create_revision (etcd's rpc.proto; not in dbtester's subset)
MAX_CREATE_REVISION = 13


class BlindingProxy(WatchProxy):
    """Forwards everything; empties the replies to the recipe's predecessor Ranges."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.blinded = 0

    def _unary(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        forward = super()._unary(method)
        if method != RANGE:
            return forward

        def blind(request: bytes, context: grpc.ServicerContext) -> bytes:
            reply = forward(request, context)
            asked = UnknownFieldSet(pb.RangeRequest.FromString(request))
            numbers = {asked[i].field_number for i in range(len(asked))}
            if MAX_CREATE_REVISION not in numbers:
                return reply
            answer = pb.RangeResponse.FromString(reply)
            del answer.kvs[:]
            answer.count = 0
            with self._lock:
                self.blinded += 1
            return answer.SerializeToString()

        return blind
