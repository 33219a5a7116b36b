"""kine: etcd's API over a SQL database, as k3s runs it; here on SQLite.

kine answers etcd's gRPC calls (the load engine speaks to it as to etcd)
from one process and its SQLite file: one member, no leader election, no
serializable reads, and only the transaction shapes kube-apiserver sends
(the engine's read-modify-write is one: a compare on the key's revision,
a put, and a read on failure).
dbtester's etcd client parts (the status call, the key count) serve it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from pydantic import Field

from dbtester.databases.base import (
    PLAIN,
    Access,
    DatabaseKind,
    LaunchPlan,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
    reported_version,
)
from dbtester.databases.etcd import EtcdClient
from dbtester.install import GoBuild, Installed, Source, SourceUnavailable, go_proxy_versions

__all__ = ["Kine", "KineFlags"]

MODULE = "github.com/k3s-io/kine"
#: kine's own default SQLite settings: WAL, one shared cache, a 30-s wait on
#: a locked table, and write transactions that take the lock at once
SQLITE_PARAMETERS = "_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate"


class KineFlags(Options):
    """kine's flags; unset means kine's default."""

    compact_interval_s: int | None = Field(
        None,
        ge=0,
        description="--compact-interval, s (kine's default: off, left to the apiserver)",
    )
    max_open_connections: int | None = Field(
        None,
        ge=0,
        description="--datastore-max-open-connections (kine's default: no limit)",
    )


class Kine(DatabaseKind):
    name: ClassVar[str] = "kine"
    default_ports: ClassVar[Mapping[str, int]] = {"client": 2379}
    flags_model = KineFlags
    client_model = EtcdClient
    protocol: ClassVar[str] = "etcd"
    watches: ClassVar[bool] = True
    max_members: ClassVar[int | None] = 1
    members_note: ClassVar[str] = "kine on SQLite is one process with one database file"
    cannot: ClassVar[Mapping[str, str]] = {
        "serializable": "kine answers every read from its database: it refuses serializable ones",
    }
    event_notes: ClassVar[Mapping[str, str]] = {
        "compact": "kine compacts by itself (--compact-interval) or when the apiserver's"
        " transaction asks; dbtester does not send it yet",
        "defrag": "kine has no defragment (its database is SQL)",
        "snapshot": "kine has no snapshot",
        "transfer_leader": "kine has no leader: it is one process",
        "upgrade": "not yet for kine",
    }

    def default_description(self, version: str) -> str:
        return f"kine v{version} (SQLite)"

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        flags = member.flags
        assert isinstance(flags, KineFlags)
        me = member.me
        database = member.data_dir / "state.db"
        argv = [
            str(installed.path("kine")),
            f"--listen-address={me.host}:{me.ports['client']}",
            f"--endpoint=sqlite://{database}?{SQLITE_PARAMETERS}",
            # kine serves metrics on :8080 of every address unless told not to
            "--metrics-bind-address=0",
            "--log-format=json",  # plain text carries terminal colour codes
        ]
        options = {
            "--compact-interval": f"{flags.compact_interval_s}s"
            if flags.compact_interval_s is not None
            else None,
            "--datastore-max-open-connections": flags.max_open_connections,
        }
        argv += [f"{name}={value}" for name, value in options.items() if value is not None]
        return LaunchPlan(argv)  # the agent makes the data folder; kine the file

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """kine answers etcd's Status (from its database) once it serves;
        it names no member and no leader."""
        import grpc

        from dbtester.databases.etcd_client import status

        try:
            status(peer.address("client"), access, timeout)
        except grpc.RpcError:
            return False
        return True

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """Its one member, while it serves."""
        return 0 if self.serving(peers[0], timeout, access) else None

    def count_keys(self, settings: LoadSettings) -> int:
        from dbtester.databases.etcd_client import count_keys

        return count_keys(settings, "kine")

    def prefill(
        self, settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
    ) -> None:
        """One put per key: kine refuses a transaction of several puts."""
        from dbtester.databases import etcd_events

        etcd_events.prefill(settings, count, value_size, advance, transactions=False)

    def install_sources(self, version: str) -> list[Source]:
        # SQLite through cgo: the build needs a C compiler (Debian's gcc)
        return [
            GoBuild(
                module=MODULE,
                version=f"v{version}",
                package=MODULE,
                binary="kine",
                env={"CGO_ENABLED": "1"},
                expected_minutes=4.0,
            )
        ]

    def released_versions(self) -> list[str]:
        return go_proxy_versions(MODULE)

    def verify_install(self, entry: Mapping[str, str], version: str) -> None:
        have = reported_version([entry["kine"], "--version"], r"version\s+v?(\S+)")
        if have not in (version, "dev"):
            raise SourceUnavailable(f"the binary reports kine {have}, not {version}")
