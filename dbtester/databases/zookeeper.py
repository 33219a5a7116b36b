"""Apache ZooKeeper: ensemble flags, JVM settings and how to install a version."""

from __future__ import annotations

import functools
import logging
import math
import shutil
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import Field, model_validator

from dbtester.databases.base import (
    KUBERNETES_NEEDS,
    PLAIN,
    Access,
    DatabaseKind,
    LaunchPlan,
    LegacyFlags,
    LoadSettings,
    MemberSpec,
    Options,
    PasswordAuth,
    Peer,
    TlsFiles,
    version_numbers,
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
from dbtester.util.keys import PREFIX, checked_keys, prefill_batches, prefill_key

if TYPE_CHECKING:
    from kazoo.client import KazooClient

__all__ = ["ZooKeeper", "ZooKeeperClient", "ZooKeeperFlags"]

ARCHIVE = "https://archive.apache.org/dist/zookeeper"
#: the first release that reads PEM key and trust stores (secure client port, quorum TLS)
PEM_STORES = (3, 5, 5)
#: what a server needs of ZooKeeper's ``provided`` dependencies (its release
#: ships them in lib/; Maven does not resolve them for a dependent): its
#: metrics library (3.6 on: without it the server fails at start with
#: NoClassDefFoundError com/codahale/metrics/Reservoir) and snapshot
#: compression; not Jetty (dbtester turns the admin server off) or the CLI's
PROVIDED = ("io.dropwizard.metrics:metrics-core", "org.xerial.snappy:snappy-java")
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
    not_found: ClassVar[str] = "NoNode"
    cannot: ClassVar[Mapping[str, str]] = {"kubernetes": KUBERNETES_NEEDS}
    watches: ClassVar[bool] = True
    watch_note: ClassVar[str] = (
        "each watcher is a persistent recursive watch (addWatch) on the keys' parent,"
        " several to a session as watch_connections says; before 3.9 an event carries"
        " no zxid, so each is matched to its put by its path and their order is judged"
        " by the zxids the creates returned"
    )
    events: ClassVar[frozenset[str]] = frozenset({"upgrade"})
    tls: ClassVar[bool] = True
    auth_model: ClassVar[type[PasswordAuth] | None] = PasswordAuth
    event_notes: ClassVar[Mapping[str, str]] = {
        "compact": "ZooKeeper purges old snapshots and logs itself (autopurge), with no call"
        " to start it",
        "defrag": "ZooKeeper keeps its tree in memory: there is no file to defragment",
        "snapshot": "ZooKeeper snapshots by itself every snapCount transactions; its admin"
        " command for one (3.9) needs an authenticated admin server",
        "transfer_leader": "ZooKeeper has no leader transfer: a leader hands over only by stopping",
    }

    def tls_refusal(self, version: str, started: bool, server_name: str | None) -> str | None:
        if server_name is not None:
            return (
                "ZooKeeper's clients check each member's certificate against the address they"
                " dial; drop server_name and give endpoints by the names the certificates carry"
            )
        if started and version and version_numbers(version) < PEM_STORES:
            return (
                f"dbtester starts ZooKeeper with TLS from 3.5.5 on (PEM key stores), not {version}"
            )
        return None

    def create_user(self, peers: Sequence[Peer], access: Access) -> None:
        """ZooKeeper has no users to create: a digest identity is whatever a
        session adds. The load's parents get a digest ACL that lets only this
        user (all permissions) and nobody else in, so a wrong password is
        refused at the load's first write."""
        from kazoo.exceptions import KazooException
        from kazoo.security import make_digest_acl

        acl = [make_digest_acl(access.user, access.secret, all=True)]
        zk = _client([p.address("client") for p in peers], 30.0, access)
        try:
            for path in (ROOT, PREFILL_ROOT):
                if zk.exists(path):
                    zk.set_acls(path, acl)
                else:
                    zk.create(path, b"", acl=acl)
        except KazooException as exc:
            raise DbtesterError(f"setting ZooKeeper's digest ACL: {exc!r}") from None
        finally:
            zk.stop()
            zk.close()

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        flags = member.flags
        assert isinstance(flags, ZooKeeperFlags)
        config = member.member_dir / "zoo.cfg"
        logback = member.member_dir / "logback.xml"
        jvm = [f"-Xms{flags.heap_min}"] if flags.heap_min else []
        jvm += [f"-Xmx{flags.heap_max}"] if flags.heap_max else []
        if flags.jute_max_buffer:
            jvm.append(f"-Djute.maxbuffer={flags.jute_max_buffer}")
        classpath = installed.entry["classpath"]
        if member.tls is not None:
            classpath = _with_netty_codec(classpath)
        argv = [
            installed.entry["java"],
            *jvm,
            # ZooKeeper logs through SLF4J: logback in Apache's builds, the simple
            # binding with Debian's; both at INFO on stderr (the database log).
            f"-Dlogback.configurationFile={logback}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(config),
        ]
        files = {
            config: _zoo_cfg(member, flags),
            logback: _LOGBACK,
            member.data_dir / "myid": f"{member.index + 1}\n",
        }
        if member.tls is not None:
            files |= member.tls.files(member.tls_dir)
            # ZooKeeper's PEM key store is one file: the key, then its certificate
            files[member.tls_dir / IDENTITY] = member.tls.key + member.tls.cert
        return LaunchPlan(argv, files)

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """'srvr' names the mode once the member serves (leader, follower, standalone)."""
        return _mode(peer, timeout, access) is not None

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """The member whose 'srvr' says ``Mode: leader`` (a one-member ensemble
        says ``standalone`` and leads itself)."""
        modes = [_mode(p, timeout, access) for p in peers]
        found = [i for i, mode in enumerate(modes) if mode in ("leader", "standalone")]
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
            MavenArtifacts(
                "org.apache.zookeeper",
                "zookeeper",
                version,
                managed_by="org.apache.zookeeper:parent",
                also=PROVIDED if version_numbers(version) >= (3, 6) else (),
            ),
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

    def session_ttl_bounds(self, flags: Options) -> tuple[int, int] | None:
        """A server negotiates a session's timeout into 2 to 20 ticks
        (minSessionTimeout, maxSessionTimeout's defaults)."""
        assert isinstance(flags, ZooKeeperFlags)
        tick_ms = flags.tick_time or 2000
        return math.ceil(2 * tick_ms / 1000), 20 * tick_ms // 1000

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
        zk = _client(settings.endpoints, settings.timeout_s, settings.access)
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

    def count_keys(self, settings: LoadSettings, prefix: bytes = PREFIX) -> int:
        self._only_load_keys(prefix)
        zk = _client(settings.endpoints, settings.timeout_s, settings.access)
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
#: the member's PEM key store (key and certificate), beside MemberTls's files
IDENTITY = "identity.pem"


def _client(endpoints: Sequence[str], timeout: float, access: Access) -> KazooClient:
    """A started kazoo session: over TLS with ``access``'s files (each
    member's certificate checked against the address dialled), and with its
    user's digest identity added."""
    from kazoo.client import KazooClient

    secure: dict[str, Any] = {}
    if access.tls is not None:
        files = access.tls
        secure = {
            "use_ssl": True,
            "verify_certs": True,
            "check_hostname": True,
            "ca": str(files.ca),
            "certfile": str(files.cert) if files.cert else None,
            "keyfile": str(files.key) if files.key else None,
        }
    if access.secret:
        secure["auth_data"] = [("digest", f"{access.user}:{access.secret}")]
    zk = KazooClient(hosts=",".join(endpoints), timeout=timeout, logger=_QUIET, **secure)
    zk.start(timeout=max(timeout, 30))
    return zk


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
    if member.tls is not None:
        lines |= _tls_settings(member)
    text = [f"{k}={v}" for k, v in lines.items() if v is not None]
    if len(member.peers) > 1:
        text += [
            f"server.{i + 1}={p.host}:{p.ports['peer']}:{p.ports['election']}"
            for i, p in enumerate(member.peers)
        ]
    return "\n".join(text) + "\n"


def _tls_settings(member: MemberSpec) -> dict[str, object]:
    """Clients only on the secure port (Netty's, the one that speaks TLS), and
    the quorum over TLS too, both requiring a certificate from the run's CA."""
    me, folder = member.me, member.tls_dir
    settings: dict[str, object] = {
        "clientPort": None,
        "clientPortAddress": None,
        "secureClientPort": me.ports["client"],
        "secureClientPortAddress": me.host,
        "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
        "sslQuorum": "true",
    }
    for prefix in ("ssl", "ssl.quorum"):
        settings |= {
            f"{prefix}.keyStore.location": folder / IDENTITY,
            f"{prefix}.keyStore.type": "PEM",
            f"{prefix}.trustStore.location": folder / "ca.pem",
            f"{prefix}.trustStore.type": "PEM",
            f"{prefix}.clientAuth": "need",
        }
    return settings


def _with_netty_codec(classpath: str) -> str:
    """Debian's zookeeper.jar names the Netty jars it uses but not
    netty-codec, which Netty's TLS handler needs; Apache's lib/ has it."""
    debian = Path("/usr/share/java")
    codec = debian / "netty-codec.jar"
    if str(debian / "zookeeper.jar") in classpath.split(":") and codec.exists():
        return f"{classpath}:{codec}"
    return classpath


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


def _mode(peer: Peer, timeout: float, access: Access) -> str | None:
    """What the four-letter word 'srvr' (allowed by default) says of the
    member's role: leader, follower, standalone; None when it does not serve.
    Over TLS on a secure port: ZooKeeper answers four-letter words there too."""
    try:
        conn = socket.create_connection((peer.host, peer.ports["client"]), timeout)
        if access.tls is not None:
            conn = _context(access.tls).wrap_socket(conn, server_hostname=peer.host)
        with conn:
            conn.settimeout(timeout)
            conn.sendall(b"srvr")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
    except OSError:  # ssl.SSLError included: a member that fails the handshake does not serve
        return None
    for line in reply.decode("utf-8", "replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


@functools.cache
def _context(files: TlsFiles) -> ssl.SSLContext:
    """The client context for ``files``, made once: the fault runner asks
    every member's mode ten times a second."""
    context = ssl.create_default_context(cafile=str(files.ca))
    if files.cert is not None:
        context.load_cert_chain(files.cert, files.key)
    return context
