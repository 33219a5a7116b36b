"""etcd: the cluster members, flags, client options and how to install a version."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from dbtester.databases.base import (
    DatabaseKind,
    LaunchPlan,
    LegacyFlags,
    LoadClient,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
    WrongValue,
    go_arch,
    reported_version,
)
from dbtester.errors import DbtesterError
from dbtester.install import (
    ArchiveDownload,
    DebianPackage,
    GoBuild,
    Installed,
    Source,
    SourceUnavailable,
)
from dbtester.util.keys import PREFIX, varint

__all__ = ["Etcd", "EtcdClient", "EtcdFlags"]

RELEASES = "https://github.com/etcd-io/etcd/releases/download"


class EtcdFlags(Options):
    """etcd server flags; unset means etcd's own default for that version."""

    snapshot_count: int | None = Field(None, ge=1, description="--snapshot-count")
    quota_backend_bytes: int | None = Field(None, ge=0, description="--quota-backend-bytes")
    heartbeat_interval_ms: int | None = Field(None, ge=1, description="--heartbeat-interval")
    election_timeout_ms: int | None = Field(None, ge=1, description="--election-timeout")
    max_request_bytes: int | None = Field(None, ge=1, description="--max-request-bytes")

    @model_validator(mode="after")
    def _election_after_heartbeats(self) -> Self:
        beat = self.heartbeat_interval_ms or 100
        election = self.election_timeout_ms or 1000
        if election < 5 * beat:
            raise ValueError(
                f"election_timeout_ms ({election}) must be at least 5 x heartbeat_interval_ms"
                f" ({beat}); etcd refuses to start otherwise"
            )
        return self


class EtcdClient(Options):
    """How the load generator spreads requests over the members."""

    #: pick_first: one endpoint; round_robin: all members; leader: only the leader
    balancer: Literal["pick_first", "round_robin", "leader"] = "round_robin"


class Etcd(DatabaseKind):
    name: ClassVar[str] = "etcd"
    default_ports: ClassVar[Mapping[str, int]] = {"client": 2379, "peer": 2380}
    flags_model = EtcdFlags
    client_model = EtcdClient

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        me = member.me
        flags = member.flags
        assert isinstance(flags, EtcdFlags)
        argv = [
            str(installed.path("etcd")),
            f"--name={me.name}",
            f"--data-dir={member.data_dir}",
            f"--listen-client-urls={me.url('client')}",
            f"--advertise-client-urls={me.url('client')}",
            f"--listen-peer-urls={me.url('peer')}",
            f"--initial-advertise-peer-urls={me.url('peer')}",
            "--initial-cluster=" + ",".join(f"{p.name}={p.url('peer')}" for p in member.peers),
            "--initial-cluster-state=new",
            f"--initial-cluster-token={member.cluster_token}",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        options = {
            "--snapshot-count": flags.snapshot_count,
            "--quota-backend-bytes": flags.quota_backend_bytes,
            "--heartbeat-interval": flags.heartbeat_interval_ms,
            "--election-timeout": flags.election_timeout_ms,
            "--max-request-bytes": flags.max_request_bytes,
        }
        argv += [f"{name}={value}" for name, value in options.items() if value is not None]
        return LaunchPlan(argv)

    def serving(self, peer: Peer, timeout: float = 1.0) -> bool:
        """etcd's /health answers true once the member has a leader."""
        try:
            with urllib.request.urlopen(f"{peer.url('client')}/health", timeout=timeout) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def install_sources(self, version: str) -> list[Source]:
        arch = go_arch()
        folder = f"etcd-v{version}-linux-{arch}"
        sources: list[Source] = [
            ArchiveDownload(
                url=f"{RELEASES}/v{version}/{folder}.tar.gz",
                checksum_url=f"{RELEASES}/v{version}/SHA256SUMS",
                locate=lambda root: {"etcd": str(root / folder / "etcd")},
            ),
            DebianPackage("etcd-server", version, _copy_debian_etcd),
        ]
        if _at_least(version, 3, 5):
            # From 3.5 on the server is its own Go module, which the proxy serves.
            sources.append(
                GoBuild(
                    module="go.etcd.io/etcd/server/v3",
                    version=f"v{version}",
                    package="go.etcd.io/etcd/server/v3",
                    binary="etcd",
                )
            )
        return sources

    def verify_install(self, entry: Mapping[str, str], version: str) -> None:
        have = reported_version([entry["etcd"], "--version"], r"etcd Version:\s*(\S+)")
        if have != version:
            raise SourceUnavailable(f"the binary reports etcd {have}, not {version}")

    def convert_legacy_flags(self, old: Mapping[str, Any]) -> LegacyFlags:
        flags: dict[str, Any] = {}
        warnings: list[tuple[str, str]] = []
        for key, value in old.items():
            if key == "snap_count":
                flags["snapshot_count"] = value
                warnings.append(
                    (
                        key,
                        "'snap_count' is now flags.snapshot_count; the original dbtester read"
                        " 'snapshot_count' and silently ignored 'snap_count', so its published"
                        " runs used etcd's default snapshot count",
                    )
                )
            elif key == "snapshot_count":  # the key the original did read
                flags["snapshot_count"] = value
            elif key == "quota_size_bytes":
                flags["quota_backend_bytes"] = value
            else:
                warnings.append((key, f"'{key}' is not an etcd flag dbtester knows; dropped"))
        return flags, warnings

    def load_client(self, settings: LoadSettings) -> LoadClient:
        return EtcdLoadClient(settings)

    def count_keys(self, settings: LoadSettings) -> int:
        import grpc

        from dbtester.proto import etcd_pb2

        request = etcd_pb2.RangeRequest(key=PREFIX, range_end=_prefix_end(PREFIX), count_only=True)
        with grpc.insecure_channel(settings.endpoints[0]) as channel:
            call = channel.unary_unary(
                KV_RANGE,
                request_serializer=etcd_pb2.RangeRequest.SerializeToString,
                response_deserializer=etcd_pb2.RangeResponse.FromString,
            )
            return int(call(request, timeout=max(settings.timeout_s, 60)).count)


KV_PUT = "/etcdserverpb.KV/Put"
KV_RANGE = "/etcdserverpb.KV/Range"
STATUS = "/etcdserverpb.Maintenance/Status"
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}:\d+$")


def _prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


class RpcFailed(Exception):  # noqa: N818 - carries a gRPC status name as the outcome
    def __init__(self, code: str, details: str = "") -> None:
        super().__init__(f"{code}: {details}" if details else code)
        self.status = code


class _PublicCalls:
    """Calls through grpc.aio's public API."""

    def __init__(self, channel: Any, timeout: float) -> None:
        self._put = channel.unary_unary(KV_PUT)
        self._range = channel.unary_unary(KV_RANGE)
        self._timeout = timeout

    async def put(self, payload: bytes) -> bytes:
        return bytes(await self._put(payload, timeout=self._timeout))

    async def range(self, payload: bytes) -> bytes:
        return bytes(await self._range(payload, timeout=self._timeout))


class _DirectCalls:
    """Calls through grpc.aio's Cython layer, skipping the per-call Task and
    wrapper objects of the public API: about 20% less client CPU per request
    (measured: 122 vs 153 us per put). Private API, so it is self-tested at open
    and the public path is used whenever it does not behave."""

    def __init__(self, channel: Any, timeout: float) -> None:
        self._raw = channel._channel
        self._timeout = timeout
        from grpc import _common

        self._codes = _common.CYGRPC_STATUS_CODE_TO_STATUS_CODE

    async def _call(self, method: bytes, payload: bytes) -> bytes:
        call = self._raw.call(method, time.time() + self._timeout, None, None, 0)
        reply = await call.unary_unary(payload, (), None)
        if not call.is_ok():
            status = await call.status()
            code = self._codes.get(status.code())
            raise RpcFailed(code.name if code else str(status.code()), status.details())
        return bytes(reply)

    async def put(self, payload: bytes) -> bytes:
        return await self._call(_PUT_B, payload)

    async def range(self, payload: bytes) -> bytes:
        return await self._call(_RANGE_B, payload)


_PUT_B = KV_PUT.encode()
_RANGE_B = KV_RANGE.encode()
_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),  # one TCP connection per channel, not shared
    ("grpc.enable_retries", 0),  # a benchmark counts failures; retries would hide them
]


class EtcdLoadClient(LoadClient):
    """etcd over gRPC with pre-encoded requests: a Put is its key between two
    constant byte strings, and replies are checked as bytes, never parsed."""

    def __init__(self, settings: LoadSettings) -> None:
        super().__init__(settings)
        value = settings.value
        # PutRequest: field 1 (key, length-delimited), field 2 (value).
        self._put_head = b"\x0a" + varint(settings.key_size)
        self._put_tail = b"\x12" + varint(len(value)) + value if value else b""
        self._value = value
        self._channels: list[Any] = []
        self._calls: list[_PublicCalls | _DirectCalls] = []
        self._range_requests: dict[bytes, bytes] = {}

    async def _targets(self) -> list[tuple[str, list[tuple[str, Any]]]]:
        """(target, channel options) to cycle through, per the balancer."""
        endpoints = list(self.settings.endpoints)
        balancer = self.settings.client.get("balancer", "round_robin")
        if balancer == "pick_first":
            return [(endpoints[0], _OPTIONS)]
        if balancer == "leader":
            return [(await _leader(endpoints, self.settings.timeout_s), _OPTIONS)]
        if all(_IPV4.match(e) for e in endpoints):
            # gRPC's own round_robin: each channel spreads its calls over every member.
            target = "ipv4:" + ",".join(endpoints)
            return [(target, [*_OPTIONS, ("grpc.lb_policy_name", "round_robin")])]
        return [(e, _OPTIONS) for e in endpoints]  # names: channels take turns instead

    async def open(self, connections: int) -> None:
        import grpc

        targets = await self._targets()
        for i in range(connections):
            target, options = targets[i % len(targets)]
            self._channels.append(grpc.aio.insecure_channel(target, options=options))
        for channel in self._channels:
            await asyncio.wait_for(channel.channel_ready(), self.settings.timeout_s)
        kind: type[_PublicCalls | _DirectCalls] = _PublicCalls
        if await _direct_path_works(self._channels[0], self.settings.timeout_s):
            kind = _DirectCalls
        self._calls = [kind(channel, self.settings.timeout_s) for channel in self._channels]

    async def write(self, conn: int, key: bytes) -> None:
        await self._calls[conn].put(self._put_head + key + self._put_tail)

    async def read(self, conn: int, key: bytes) -> None:
        request = self._range_requests.get(key)
        if request is None:
            from dbtester.proto import etcd_pb2

            serializable = self.settings.consistency == "serializable"
            request = etcd_pb2.RangeRequest(key=key, serializable=serializable).SerializeToString()
            self._range_requests[key] = request
        reply = await self._calls[conn].range(request)
        if key not in reply or self._value not in reply:
            raise WrongValue(key)

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
        self._channels, self._calls = [], []

    def outcome(self, error: BaseException) -> str:
        if isinstance(error, RpcFailed):
            return error.status
        code = getattr(error, "code", None)
        if callable(code):
            return str(code().name)
        return super().outcome(error)


async def _direct_path_works(channel: Any, timeout: float) -> bool:
    """One harmless call (a count of keys under a prefix nothing uses) through the
    direct path; any surprise means this grpcio differs and we use the public API."""
    from dbtester.proto import etcd_pb2

    probe = etcd_pb2.RangeRequest(key=b"\x00dbtester-probe", count_only=True)
    try:
        reply = await _DirectCalls(channel, timeout).range(probe.SerializeToString())
        etcd_pb2.RangeResponse.FromString(reply)
    except Exception:
        return False
    return True


async def _leader(endpoints: list[str], timeout: float) -> str:
    """The endpoint whose member is the leader (Maintenance.Status on each)."""
    import grpc

    from dbtester.proto import etcd_pb2

    for endpoint in endpoints:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            status = channel.unary_unary(
                STATUS,
                request_serializer=etcd_pb2.StatusRequest.SerializeToString,
                response_deserializer=etcd_pb2.StatusResponse.FromString,
            )
            try:
                reply = await status(etcd_pb2.StatusRequest(), timeout=timeout)
            except grpc.aio.AioRpcError:
                continue
            if reply.leader and reply.leader == reply.header.member_id:
                return endpoint
    raise DbtesterError(f"no etcd leader among {', '.join(endpoints)}")


def _copy_debian_etcd(root: Path, dest: Path) -> dict[str, str]:
    target = dest / "etcd"
    shutil.copy2(root / "usr/bin/etcd", target)
    return {"etcd": str(target)}


def _at_least(version: str, major: int, minor: int) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (major, minor)
    except (ValueError, IndexError):
        return True  # not a release number (e.g. a commit); let the Go proxy decide
