"""etcd: the cluster members, flags, client options and how to install a version."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from dbtester.databases.base import (
    DatabaseKind,
    EventCall,
    LaunchPlan,
    LegacyFlags,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
    go_arch,
    reported_version,
)
from dbtester.install import (
    ArchiveDownload,
    DebianPackage,
    GoBuild,
    Installed,
    Source,
    SourceUnavailable,
    go_proxy_versions,
)
from dbtester.util.keys import PREFIX

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

    balancer: Literal["pick_first", "round_robin", "leader"] = Field(
        "round_robin",
        description="pick_first: every connection to the first member; round_robin:"
        " connection c to member c mod n; leader: every connection to the leader",
    )


class Etcd(DatabaseKind):
    name: ClassVar[str] = "etcd"
    default_ports: ClassVar[Mapping[str, int]] = {"client": 2379, "peer": 2380}
    flags_model = EtcdFlags
    client_model = EtcdClient
    protocol: ClassVar[str] = "etcd"
    watches: ClassVar[bool] = True
    events: ClassVar[frozenset[str]] = frozenset(
        {"compact", "defrag", "snapshot", "transfer_leader", "upgrade"}
    )

    def upgrade_refusal(self, running: str, to: str) -> str | None:
        """etcd's rules: one minor version at a time, and 3.6 only from 3.5.20
        on (earlier 3.5 members do not keep the membership 3.6 reads)."""
        why = super().upgrade_refusal(running, to)
        if why:
            return why
        have, want = _minor(running), _minor(to)
        if want[0] != have[0] or want[1] > have[1] + 1:
            return f"etcd upgrades one minor version at a time, not {running} to {to}"
        if want == (3, 6) and have == (3, 5) and not _at_least_patch(running, 20):
            return "etcd 3.6 needs the cluster at 3.5.20 or later first"
        return None

    def run_event(self, event: str, call: EventCall) -> str:
        # gRPC on first use: validating a test case loads every kind
        from dbtester.databases import etcd_events

        return etcd_events.run(event, call)

    def prefill(
        self, settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
    ) -> None:
        from dbtester.databases import etcd_events

        etcd_events.prefill(settings, count, value_size, advance)

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

    def leader(self, peers: Sequence[Peer], timeout: float = 2.0) -> int | None:
        """Each member's maintenance status names its own id and the leader's
        (the JSON gateway writes uint64s as strings)."""
        ids: dict[str, int] = {}
        leaders: set[str] = set()
        for index, peer in enumerate(peers):
            request = urllib.request.Request(
                f"{peer.url('client')}/v3/maintenance/status", data=b"{}", method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=timeout) as reply:
                    status = json.loads(reply.read())
            except (OSError, ValueError):
                continue  # down, paused, or not answering: it says nothing
            ids[str(status.get("header", {}).get("member_id", ""))] = index
            if str(status.get("leader", "0")) != "0":
                leaders.add(str(status["leader"]))
        found = [ids[leader] for leader in leaders if leader in ids]
        return found[0] if len(found) == 1 else None

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

    def released_versions(self) -> list[str]:
        # The server module's list: the Go build installs any of them (3.5 on).
        return go_proxy_versions("go.etcd.io/etcd/server/v3")

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


KV_RANGE = "/etcdserverpb.KV/Range"


def _prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _copy_debian_etcd(root: Path, dest: Path) -> dict[str, str]:
    target = dest / "etcd"
    shutil.copy2(root / "usr/bin/etcd", target)
    return {"etcd": str(target)}


def _minor(version: str) -> tuple[int, int]:
    major, minor, *_ = [*(int(p) if p.isdigit() else 0 for p in version.split(".")[:2]), 0, 0]
    return major, minor


def _at_least_patch(version: str, patch: int) -> bool:
    parts = version.split(".")
    return len(parts) > 2 and parts[2].isdigit() and int(parts[2]) >= patch


def _at_least(version: str, major: int, minor: int) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (major, minor)
    except (ValueError, IndexError):
        return True  # not a release number (e.g. a commit); let the Go proxy decide
