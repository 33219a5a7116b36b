"""etcd: the cluster members, flags, client options and how to install a version."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from dbtester.databases.base import (
    PLAIN,
    Access,
    DatabaseKind,
    EventCall,
    LaunchPlan,
    LegacyFlags,
    LoadSettings,
    MemberSpec,
    Options,
    PasswordAuth,
    Peer,
    SizeProbe,
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
    go_proxy_versions,
)
from dbtester.util.keys import PREFIX
from dbtester.util.prometheus import read_gauges

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
    #: "http": etcd's HTTP endpoints (/metrics, /health) apart from the client
    #: port, with TLS only: on one TLS port etcd hands gRPC to its HTTP server,
    #: which answered 2-3 times slower here than gRPC served natively.
    #: "metrics": /metrics in plain HTTP, always (the agent's sampler reads
    #: the database's size there each second, whatever the client port asks)
    default_ports: ClassVar[Mapping[str, int]] = {
        "client": 2379,
        "peer": 2380,
        "http": 2382,
        "metrics": 2381,
    }
    flags_model = EtcdFlags
    client_model = EtcdClient
    protocol: ClassVar[str] = "etcd"
    watches: ClassVar[bool] = True
    events: ClassVar[frozenset[str]] = frozenset(
        {"compact", "defrag", "snapshot", "transfer_leader", "upgrade"}
    )
    tls: ClassVar[bool] = True
    auth_model: ClassVar[type[PasswordAuth] | None] = PasswordAuth

    def session_ttl_bounds(self, flags: Options) -> tuple[int, int] | None:
        """etcd raises a lease's TTL below one and a half election timeouts to
        that, rounded up to a second (server.go's minTTL); at most 9e9 s."""
        assert isinstance(flags, EtcdFlags)
        election_ms = flags.election_timeout_ms or 1000
        return math.ceil(1.5 * election_ms / 1000), 9_000_000_000

    def create_user(self, peers: Sequence[Peer], access: Access) -> None:
        """The user (and root, which etcd needs before it enables auth),
        both with the root role, so that maintenance events may run as it."""
        import grpc

        from dbtester.databases.etcd_client import create_user

        try:
            create_user(peers[0].address("client"), access, timeout=30.0)
        except grpc.RpcError as exc:
            raise DbtesterError(f"creating etcd user {access.user!r}: {exc.details()}") from None

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
        me, scheme = member.me, member.scheme
        flags = member.flags
        assert isinstance(flags, EtcdFlags)
        cluster = ",".join(f"{p.name}={p.url('peer', scheme)}" for p in member.peers)
        argv = [
            str(installed.path("etcd")),
            f"--name={me.name}",
            f"--data-dir={member.data_dir}",
            f"--listen-client-urls={me.url('client', scheme)}",
            f"--advertise-client-urls={me.url('client', scheme)}",
            f"--listen-peer-urls={me.url('peer', scheme)}",
            f"--initial-advertise-peer-urls={me.url('peer', scheme)}",
            f"--initial-cluster={cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={member.cluster_token}",
            f"--listen-metrics-urls={me.url('metrics')}",
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
        if member.tls is None:
            return LaunchPlan(argv)
        argv += [f"--listen-client-http-urls={me.url('http', scheme)}", *_tls_flags(member.tls_dir)]
        return LaunchPlan(argv, files=member.tls.files(member.tls_dir))

    def size_probe(self, member: MemberSpec) -> SizeProbe:
        """The member's dbSize and dbSizeInUse, as its /metrics gauges
        (what its status reports, without a client's TLS and credentials:
        Status needs the root role once auth is on)."""
        return partial(_db_sizes, f"{member.me.url('metrics')}/metrics")

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """The member answers its status and knows a leader."""
        return self._status(peer, timeout, access)[1] != 0

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """Each member's status names its own id and the leader's."""
        ids: dict[int, int] = {}
        leaders: set[int] = set()
        for index, peer in enumerate(peers):
            me, leader = self._status(peer, timeout, access)
            if me:
                ids[me] = index
            if leader:
                leaders.add(leader)
        found = [ids[leader] for leader in leaders if leader in ids]
        return found[0] if len(found) == 1 else None

    @staticmethod
    def _status(peer: Peer, timeout: float, access: Access) -> tuple[int, int]:
        """The member's id and its leader's (0: none); (0, 0) when it does
        not answer (down, paused, or not yet serving)."""
        import grpc

        from dbtester.databases.etcd_client import status

        try:
            reply = status(peer.address("client"), access, timeout)
        except grpc.RpcError:
            return 0, 0
        return reply.header.member_id, reply.leader

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

    def count_keys(self, settings: LoadSettings, prefix: bytes = PREFIX) -> int:
        from dbtester.databases.etcd_client import count_keys

        return count_keys(settings, "etcd", prefix)


#: the gauges of a member's database file and of the part of it in use
DB_SIZE, DB_IN_USE = "etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes"


def _db_sizes(url: str, timeout: float) -> tuple[int, int] | None:
    try:
        found = read_gauges(url, (DB_SIZE, DB_IN_USE), timeout)
    except OSError:  # paused, starting or gone: the sampler records "not known"
        return None
    if DB_SIZE not in found or DB_IN_USE not in found:
        return None
    return int(found[DB_SIZE]), int(found[DB_IN_USE])


def _tls_flags(folder: Path) -> list[str]:
    """Clients and peers over TLS, each side presenting a certificate the
    run's CA signed (mutual TLS, as Kubernetes runs etcd)."""
    ca, cert, key = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    return [
        f"--cert-file={cert}",
        f"--key-file={key}",
        f"--trusted-ca-file={ca}",
        "--client-cert-auth",
        f"--peer-cert-file={cert}",
        f"--peer-key-file={key}",
        f"--peer-trusted-ca-file={ca}",
        "--peer-client-cert-auth",
    ]


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
