"""kine: etcd's API over a SQL database, as k3s runs it: SQLite or PostgreSQL.

kine answers etcd's gRPC calls (the load engine speaks to it as to etcd):
no leader election, no serializable reads, and only the transaction shapes
kube-apiserver sends (the engine's read-modify-write is one: a compare on
the key's revision, a put, and a read on failure). On SQLite it is one
process and its file: one member. On PostgreSQL (``backend: postgres``)
member 0's agent also runs a PostgreSQL server of its own (a companion,
from Debian's package), and every kine member, like k3s servers, shares
that one database.
dbtester's etcd client parts (the status call, the key count) serve it.
"""

from __future__ import annotations

import glob
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from dbtester.databases.base import (
    COMPANION_DATA,
    PLAIN,
    Access,
    Companion,
    DatabaseKind,
    LaunchPlan,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
    reported_version,
    version_numbers,
)
from dbtester.databases.etcd import EtcdClient
from dbtester.errors import MemberError
from dbtester.install import GoBuild, Installed, Source, SourceUnavailable, go_proxy_versions
from dbtester.util.keys import PREFIX

__all__ = ["Kine", "KineFlags"]

MODULE = "github.com/k3s-io/kine"
#: kine's own default SQLite settings: WAL, one shared cache, a 30-s wait on
#: a locked table, and write transactions that take the lock at once
SQLITE_PARAMETERS = "_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate"


#: the database user kine connects as (PostgreSQL's superuser in a cluster
#: made for the run, reached without a password: trust on its own port)
POSTGRES_USER = "dbtester"
#: where Debian's postgresql package puts the server's programs
POSTGRES_BINARIES = "/usr/lib/postgresql/*/bin"


class KineFlags(Options):
    """kine's flags; unset means kine's default."""

    backend: Literal["sqlite", "postgres"] = Field(
        "sqlite",
        description="kine's database: sqlite (a file; one member) or postgres (a"
        " PostgreSQL server member 0's agent starts; any number of kine members share it)",
    )
    postgres_synchronous_commit: Literal["on", "off"] | None = Field(
        None,
        description="PostgreSQL's synchronous_commit (its default: on, an fsync per commit)",
    )

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
    #: backend: postgres adds the PostgreSQL server's port
    postgres_ports: ClassVar[Mapping[str, int]] = {"client": 2379, "postgres": 5432}
    flags_model = KineFlags
    client_model = EtcdClient
    protocol: ClassVar[str] = "etcd"
    watches: ClassVar[bool] = True
    max_members: ClassVar[int | None] = 1
    members_note: ClassVar[str] = (
        "kine on SQLite is one process with one database file (backend: postgres takes several)"
    )
    cannot: ClassVar[Mapping[str, str]] = {
        "serializable": "kine answers every read from its database: it refuses serializable ones",
        "locks": "kine accepts only the transactions kube-apiserver sends, and etcd's lock"
        " recipe compares a key's create revision",
    }

    event_notes: ClassVar[Mapping[str, str]] = {
        "compact": "kine compacts by itself (--compact-interval) or when the apiserver's"
        " transaction asks; dbtester does not send it yet",
        "defrag": "kine has no defragment (its database is SQL)",
        "snapshot": "kine has no snapshot",
        "transfer_leader": "kine has no leader: it is one process",
        "upgrade": "not yet for kine",
    }

    def quorum(self, members: int) -> int:
        # its members share one SQL database: any one of them answers
        return 1 if members else 0

    def default_description(self, version: str) -> str:
        return f"kine v{version} (SQLite)"

    def ports(self, flags: Options) -> Mapping[str, int]:
        assert isinstance(flags, KineFlags)
        return self.postgres_ports if flags.backend == "postgres" else self.default_ports

    def first_serves_first(self, flags: Options) -> bool:
        return self.companion(flags) is not None

    def companion(self, flags: Options) -> str | None:
        assert isinstance(flags, KineFlags)
        return "postgres" if flags.backend == "postgres" else None

    def members_limit(self, flags: Options) -> tuple[int | None, str]:
        assert isinstance(flags, KineFlags)
        if flags.backend == "postgres":
            return None, ""
        return self.max_members, self.members_note

    def setup_note(self, flags: Options, client: Options, members: int) -> str | None:
        assert isinstance(flags, KineFlags)
        if flags.backend != "postgres":
            return None
        shared = f"its {members} kine members share it" if members > 1 else "kine uses it"
        commit = flags.postgres_synchronous_commit or "on"
        return (
            f"kine on PostgreSQL: member 0's host runs the server (synchronous_commit"
            f" {commit}), and {shared}; the SERVER-POSTGRES- rows are that server's own figures"
        )

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        flags = member.flags
        assert isinstance(flags, KineFlags)
        me = member.me
        if flags.backend == "postgres":
            first = member.peers[0]
            endpoint = (
                f"postgres://{POSTGRES_USER}@{first.address('postgres')}/kine?sslmode=disable"
            )
        else:
            endpoint = f"sqlite://{member.data_dir / 'state.db'}?{SQLITE_PARAMETERS}"
        argv = [
            str(installed.path("kine")),
            f"--listen-address={me.host}:{me.ports['client']}",
            f"--endpoint={endpoint}",
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
        # the agent makes the data folder; kine its file, or PostgreSQL its own
        companion = _postgres(member, flags) if flags.backend == "postgres" else None
        return LaunchPlan(argv, companion=companion)

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

    def count_keys(self, settings: LoadSettings, prefix: bytes = PREFIX) -> int:
        from dbtester.databases.etcd_client import count_keys

        return count_keys(settings, "kine", prefix)

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


def postgres_binaries() -> Path:
    """The folder of PostgreSQL's server programs on this host (the newest
    of Debian's), or ``postgres`` on the PATH; MemberError when neither is."""
    found = sorted(
        (Path(d) for d in glob.glob(POSTGRES_BINARIES) if (Path(d) / "postgres").exists()),
        key=lambda d: version_numbers(d.parent.name),
    )
    if found:
        return found[-1]
    on_path = shutil.which("postgres")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    raise MemberError(
        "kine's backend: postgres needs PostgreSQL's server on member 0's host, and it has"
        " none (Debian: apt-get install postgresql)"
    )


def _postgres(member: MemberSpec, flags: KineFlags) -> Companion | None:
    """Member 0's PostgreSQL server: a cluster made for the run in its data
    folder (initdb), listening on its own address and port, no Unix socket,
    every client trusted (it lives for one run, on the test network)."""
    if member.index != 0:
        return None
    binaries = postgres_binaries()
    me = member.me
    port = me.ports["postgres"]
    argv = [
        str(binaries / "postgres"),
        "-D",
        COMPANION_DATA,
        "-p",
        str(port),
        "-c",
        f"listen_addresses={me.host}",
        "-c",
        "unix_socket_directories=",
        # kine keeps a pool per member; the default 100 is enough for a few
        "-c",
        "max_connections=300",
    ]
    if flags.postgres_synchronous_commit is not None:
        argv += ["-c", f"synchronous_commit={flags.postgres_synchronous_commit}"]
    initdb = [
        str(binaries / "initdb"),
        "-D",
        COMPANION_DATA,
        f"--username={POSTGRES_USER}",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
    ]
    hba = "local all all trust\nhost all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n"
    return Companion(
        name="postgres",
        argv=argv,
        ready=(me.host, port),
        folder="postgres",
        setup=(initdb,),
        files={"pg_hba.conf": hba},
        unprivileged=True,
    )
