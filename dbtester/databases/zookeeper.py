"""Apache ZooKeeper: ensemble flags, JVM settings and how to install a version."""

from __future__ import annotations

import logging
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import Field, model_validator

from dbtester.databases.base import (
    PLAIN,
    Access,
    DatabaseKind,
    LaunchPlan,
    LegacyFlags,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
)
from dbtester.errors import DbtesterError
from dbtester.install import (
    ArchiveDownload,
    DebianPackage,
    Installed,
    MavenArtifacts,
    Source,
    SourceUnavailable,
    maven_versions,
)
from dbtester.util.keys import checked_keys, prefill_batches, prefill_key

__all__ = ["ZooKeeper", "ZooKeeperClient", "ZooKeeperFlags"]

ARCHIVE = "https://archive.apache.org/dist/zookeeper"
#: connections ZooKeeper accepts from one client address when maxClientCnxns is unset
DEFAULT_MAX_CLIENT_CNXNS = 60
HEAP = r"^[1-9][0-9]*[kKmMgG]?$"


class ZooKeeperFlags(Options):
    """zoo.cfg settings and JVM options; unset means ZooKeeper's default."""

    tick_time: int | None = Field(None, ge=1, description="tickTime, ms")
    init_limit: int | None = Field(None, ge=1, description="initLimit, ticks")
    sync_limit: int | None = Field(None, ge=1, description="syncLimit, ticks")
    snap_count: int | None = Field(None, ge=1, description="snapCount")
    max_client_cnxns: int | None = Field(None, ge=0, description="maxClientCnxns")
    jute_max_buffer: int | None = Field(None, ge=1, description="-Djute.maxbuffer")
    heap_min: str | None = Field(None, pattern=HEAP, description="-Xms, e.g. 512m")
    heap_max: str | None = Field(None, pattern=HEAP, description="-Xmx, e.g. 4g")

    @model_validator(mode="after")
    def _heap_order(self) -> Self:
        if self.heap_min and self.heap_max and _bytes(self.heap_min) > _bytes(self.heap_max):
            raise ValueError(f"heap_min ({self.heap_min}) exceeds heap_max ({self.heap_max})")
        return self


class ZooKeeperClient(Options):
    """The load's ZooKeeper sessions."""

    session_timeout_ms: int = Field(30000, ge=1000, description="Each session's timeout, ms")


class ZooKeeper(DatabaseKind):
    name: ClassVar[str] = "zookeeper"
    default_ports: ClassVar[Mapping[str, int]] = {"client": 2181, "peer": 2888, "election": 3888}
    flags_model = ZooKeeperFlags
    client_model = ZooKeeperClient
    protocol: ClassVar[str] = "zookeeper"
    watches: ClassVar[bool] = True
    watch_note: ClassVar[str] = (
        "each watcher is a persistent recursive watch (addWatch) on the keys' parent,"
        " several to a session as watch_connections says; before 3.9 an event carries"
        " no zxid, so each is matched to its put by its path and their order is judged"
        " by the zxids the creates returned"
    )
    events: ClassVar[frozenset[str]] = frozenset({"upgrade"})
    event_notes: ClassVar[Mapping[str, str]] = {
        "compact": "ZooKeeper purges old snapshots and logs itself (autopurge), with no call"
        " to start it",
        "defrag": "ZooKeeper keeps its tree in memory: there is no file to defragment",
        "snapshot": "ZooKeeper snapshots by itself every snapCount transactions; its admin"
        " command for one (3.9) needs an authenticated admin server",
        "transfer_leader": "ZooKeeper has no leader transfer: a leader hands over only by stopping",
    }

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        flags = member.flags
        assert isinstance(flags, ZooKeeperFlags)
        config = member.member_dir / "zoo.cfg"
        logback = member.member_dir / "logback.xml"
        jvm = [f"-Xms{flags.heap_min}"] if flags.heap_min else []
        jvm += [f"-Xmx{flags.heap_max}"] if flags.heap_max else []
        if flags.jute_max_buffer:
            jvm.append(f"-Djute.maxbuffer={flags.jute_max_buffer}")
        argv = [
            installed.entry["java"],
            *jvm,
            # ZooKeeper logs through SLF4J: logback in Apache's builds, the simple
            # binding with Debian's; both at INFO on stderr (the database log).
            f"-Dlogback.configurationFile={logback}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            installed.entry["classpath"],
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(config),
        ]
        files = {
            config: _zoo_cfg(member, flags),
            logback: _LOGBACK,
            member.data_dir / "myid": f"{member.index + 1}\n",
        }
        return LaunchPlan(argv, files)

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """'srvr' names the mode once the member serves (leader, follower, standalone)."""
        return _mode(peer, timeout) is not None

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """The member whose 'srvr' says ``Mode: leader`` (a one-member ensemble
        says ``standalone`` and leads itself)."""
        found = [i for i, p in enumerate(peers) if _mode(p, timeout) in ("leader", "standalone")]
        return found[0] if len(found) == 1 else None

    def released_versions(self) -> list[str]:
        # Maven Central has every release; install falls back to it.
        return maven_versions("org.apache.zookeeper", "zookeeper")

    def install_sources(self, version: str) -> list[Source]:
        base = f"{ARCHIVE}/zookeeper-{version}/apache-zookeeper-{version}-bin.tar.gz"
        return [
            ArchiveDownload(
                url=base,
                checksum_url=f"{base}.sha512",
                algorithm="sha512",
                locate=lambda root: _classpath(root / f"apache-zookeeper-{version}-bin" / "lib"),
            ),
            # Its jar names its dependencies (other Debian packages) in its manifest,
            # so only the installed package works.
            DebianPackage("zookeeper", version, _debian_entry, download_ok=False),
            MavenArtifacts("org.apache.zookeeper", "zookeeper", version),
        ]

    def convert_legacy_flags(self, old: Mapping[str, Any]) -> LegacyFlags:
        renames = {
            "tick_time": "tick_time",
            "init_limit": "init_limit",
            "sync_limit": "sync_limit",
            "snap_count": "snap_count",
            "max_client_connections": "max_client_cnxns",
            "java_d_jute_max_buffer": "jute_max_buffer",
            "java_xms": "heap_min",
            "java_xmx": "heap_max",
        }
        flags: dict[str, Any] = {}
        warnings: list[tuple[str, str]] = []
        for key, value in old.items():
            if key in renames:
                flags[renames[key]] = value
            else:
                warnings.append(
                    (key, f"'{key}' is not a ZooKeeper setting dbtester knows; dropped")
                )
        return flags, warnings

    def fit_flags(self, flags: Options, connections: int) -> tuple[Options, str | None]:
        """ZooKeeper refuses more than maxClientCnxns (default 60) connections from
        one address: the load's connections, plus one for seeding or counting,
        all come from this machine."""
        assert isinstance(flags, ZooKeeperFlags)
        needed = connections + 1
        limit = flags.max_client_cnxns
        if limit is None:
            if needed <= DEFAULT_MAX_CLIENT_CNXNS:
                return flags, None
            fitted = flags.model_copy(update={"max_client_cnxns": needed})
            return fitted, (
                f"flags.max_client_cnxns set to {needed}: ZooKeeper's default of"
                f" {DEFAULT_MAX_CLIENT_CNXNS} connections per client address is fewer than"
                f" the {connections} connections (plus one) this workload opens"
            )
        if limit != 0 and limit < needed:
            raise ValueError(
                f"max_client_cnxns ({limit}) is fewer than the {connections} connections"
                f" (plus one) the workload opens from this machine; ZooKeeper would refuse"
                f" the rest: raise it to at least {needed}, or set 0 (no limit)"
            )
        return flags, None

    def prefill(
        self, settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
    ) -> None:
        """Under a parent of their own (the load's parent counts its children
        for verification), in multi transactions of PREFILL_BATCH_BYTES."""
        from kazoo.client import KazooClient

        zk = KazooClient(
            hosts=",".join(settings.endpoints), timeout=settings.timeout_s, logger=_QUIET
        )
        zk.start(timeout=max(settings.timeout_s, 30))
        value = b"v" * value_size
        try:
            zk.ensure_path(PREFILL_ROOT)
            for batch in prefill_batches(count, value_size, PREFILL_OPS):
                transaction = zk.transaction()
                for n in batch:
                    transaction.create(f"{PREFILL_ROOT}/{prefill_key(n)}", value)
                failed = [r for r in transaction.commit() if isinstance(r, Exception)]
                if failed:
                    raise DbtesterError(f"the pre-fill failed: {failed[0]!r}")
                advance(len(batch))
        finally:
            zk.stop()
            zk.close()

    def count_keys(self, settings: LoadSettings) -> int:
        from kazoo.client import KazooClient

        zk = KazooClient(
            hosts=",".join(settings.endpoints), timeout=settings.timeout_s, logger=_QUIET
        )
        zk.start(timeout=max(settings.timeout_s, 30))
        try:
            if not zk.exists(ROOT):
                return 0
            # The parent's stat counts its children; listing a million would
            # exceed ZooKeeper's reply size limit. The checked clients' keys
            # share the parent and are no load's.
            checked = sum(zk.exists(f"{ROOT}/{key}") is not None for key in checked_keys())
            return int(zk.exists(ROOT).numChildren) - checked
        finally:
            zk.stop()
            zk.close()


ROOT = "/dbtester"
#: the pre-filled keys' parent, apart from the load's
PREFILL_ROOT = "/dbtester-prefill"
#: creates in one multi transaction while pre-filling
PREFILL_OPS = 500
# kazoo logs every dropped connection as a warning, which Python's last-resort
# handler would print behind dbtester's back; a failed count is reported once.
_QUIET = logging.getLogger("dbtester.kazoo")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _zoo_cfg(member: MemberSpec, flags: ZooKeeperFlags) -> str:
    me = member.me
    lines = {
        "tickTime": flags.tick_time or 2000,
        "initLimit": flags.init_limit or 10,
        "syncLimit": flags.sync_limit or 5,
        "dataDir": member.data_dir,
        "clientPort": me.ports["client"],
        "clientPortAddress": me.host,  # never listen beyond the address we were given
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "srvr,ruok,mntr",
        "snapCount": flags.snap_count,
        "maxClientCnxns": flags.max_client_cnxns,
    }
    text = [f"{k}={v}" for k, v in lines.items() if v is not None]
    if len(member.peers) > 1:
        text += [
            f"server.{i + 1}={p.host}:{p.ports['peer']}:{p.ports['election']}"
            for i, p in enumerate(member.peers)
        ]
    return "\n".join(text) + "\n"


_LOGBACK = """<configuration>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDERR"/></root>
</configuration>
"""


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise SourceUnavailable("no 'java' on PATH (ZooKeeper needs a JRE, e.g. Java 17)")
    return java


def _classpath(lib: Path) -> dict[str, str]:
    jars = sorted(str(p) for p in lib.glob("*.jar"))
    if not jars:
        raise SourceUnavailable(f"no jars under {lib}")
    return {"java": _java(), "classpath": ":".join(jars)}


def _debian_entry(root: Path, dest: Path) -> dict[str, str]:
    # zookeeper.jar's manifest names its dependencies but no SLF4J binding;
    # without one ZooKeeper logs nothing at all.
    jars = ["/usr/share/java/zookeeper.jar"]
    if Path("/usr/share/java/slf4j-simple.jar").exists():
        jars.append("/usr/share/java/slf4j-simple.jar")
    return {"java": _java(), "classpath": ":".join(jars)}


def _bytes(size: str) -> int:
    unit = size[-1].lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(unit, 1)
    digits = size[:-1] if unit in "kmg" else size
    return int(digits) * scale


def _mode(peer: Peer, timeout: float) -> str | None:
    """What the four-letter word 'srvr' (allowed by default) says of the
    member's role: leader, follower, standalone; None when it does not serve."""
    try:
        with socket.create_connection((peer.host, peer.ports["client"]), timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(b"srvr")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
    except OSError:
        return None
    for line in reply.decode("utf-8", "replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None
