"""The small interface every database kind implements, one module per kind.

Everything kind-specific lives in ``dbtester/databases/<kind>.py``: its flags and
client options (validated in test cases), how to install a version, and how the
original dbtester spelled its flags. Later parts of dbtester (agent, load
generator, verification) extend this interface rather than switching on the
kind anywhere else. The version is always data (a string), never a type.
"""

from __future__ import annotations

import itertools
import platform
import re
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from dbtester.install import Installed, Source, SourceUnavailable, ensure_installed
from dbtester.util.keys import PREFIX
from dbtester.util.net import join_host_port, tcp_open
from dbtester.util.paths import from_the_case
from dbtester.util.progress import Reporter

__all__ = [
    "COMPANION_DATA",
    "KUBERNETES_NEEDS",
    "PLAIN",
    "Access",
    "AuthKeys",
    "Companion",
    "DatabaseKind",
    "EventCall",
    "EventFailed",
    "LaunchPlan",
    "LegacyFlags",
    "LoadSettings",
    "MemberSpec",
    "MemberTls",
    "Options",
    "PasswordAuth",
    "Peer",
    "SizeProbe",
    "TlsFiles",
    "TokenAuth",
    "go_arch",
    "reported_version",
    "size_text",
    "transfer_ends",
    "version_numbers",
]

#: why a kind without etcd's API cannot run ``type: kubernetes`` (its ``cannot``)
KUBERNETES_NEEDS = (
    "Kubernetes' storage needs etcd's API: revisions, transactions on an object's"
    " mod_revision and lists pinned at a revision"
)


class Options(BaseModel):
    """Base of every kind's ``flags`` and ``client`` models: frozen, strict, no extras."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


#: an environment variable's name
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class AuthKeys(Options):
    """Base of a kind's ``auth`` keys: who connects, and where its secret is,
    an environment variable or a file (a test case never holds the secret
    itself, so its copy in the results cannot)."""

    @property
    def who(self) -> str:
        """The user (empty where the secret alone says who: a token)."""
        return ""

    @property
    def source(self) -> tuple[str, str]:
        """Where the secret is: (key, an environment variable's name or a path)."""
        raise NotImplementedError


def _one_of(model: Options, env: str, file: str, what: str) -> None:
    if (getattr(model, env) is None) == (getattr(model, file) is None):
        raise ValueError(f"give the {what}'s {env} or its {file} (one)")


def _source(model: Options, env: str, file: str) -> tuple[str, str]:
    name = getattr(model, env)
    return (env, name) if name is not None else (file, str(getattr(model, file)))


class PasswordAuth(AuthKeys):
    """A user and where its password is."""

    user: str = Field(
        min_length=1, max_length=128, pattern=r"^[^\s:]+$", description="The user to connect as"
    )
    password_env: str | None = Field(
        None, pattern=ENV_NAME_PATTERN, description="The environment variable holding the password"
    )
    password_file: str | None = Field(
        None, min_length=1, description="A file holding the password (its first line)"
    )

    @field_validator("password_file")
    @classmethod
    def _from_the_case(cls, value: str | None, info: ValidationInfo) -> str | None:
        return from_the_case(value, info.context)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        _one_of(self, "password_env", "password_file", "password")
        return self

    @property
    def who(self) -> str:
        return self.user

    @property
    def source(self) -> tuple[str, str]:
        return _source(self, "password_env", "password_file")


class TokenAuth(AuthKeys):
    """Where a token is (it says who connects)."""

    token_env: str | None = Field(
        None, pattern=ENV_NAME_PATTERN, description="The environment variable holding the token"
    )
    token_file: str | None = Field(
        None, min_length=1, description="A file holding the token (its first line)"
    )

    @field_validator("token_file")
    @classmethod
    def _from_the_case(cls, value: str | None, info: ValidationInfo) -> str | None:
        return from_the_case(value, info.context)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        _one_of(self, "token_env", "token_file", "token")
        return self

    @property
    def source(self) -> tuple[str, str]:
        return _source(self, "token_env", "token_file")


#: new flags, and (old key, note) for each key not carried over or whose meaning changed
LegacyFlags = tuple[dict[str, Any], list[tuple[str, str]]]


@dataclass(frozen=True)
class Peer:
    """One member as every member must know it: name, address and named ports."""

    name: str
    host: str
    ports: Mapping[str, int]

    def url(self, port: str, scheme: str = "http") -> str:
        return f"{scheme}://{self.address(port)}"

    def address(self, port: str) -> str:
        return join_host_port(self.host, self.ports[port])


@dataclass(frozen=True)
class MemberTls:
    """A member's TLS identity as PEM text: the run's CA, and the member's
    certificate and key (for clients and for its peers). No repr: a key."""

    ca: str = field(repr=False)
    cert: str = field(repr=False)
    key: str = field(repr=False)

    def files(self, folder: Path) -> dict[Path, str]:
        """The three as files in ``folder`` (a LaunchPlan writes them)."""
        return {
            folder / "ca.pem": self.ca,
            folder / "cert.pem": self.cert,
            folder / "key.pem": self.key,
        }


@dataclass(frozen=True)
class MemberSpec:
    """Member ``index`` of ``peers``: what the agent asks a kind to launch;
    ``tls``: serve clients and peers over TLS with this identity (None: plaintext)."""

    index: int
    peers: tuple[Peer, ...]
    flags: Options
    member_dir: Path  # config files live here
    data_dir: Path  # the database's own data, measured and removed at stop
    cluster_token: str
    tls: MemberTls | None = None
    #: start with authentication on (kinds that must know before they start)
    auth: bool = False

    @property
    def tls_dir(self) -> Path:
        """Where the member's TLS files are written (not in its data: never archived)."""
        return self.member_dir / "tls"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def me(self) -> Peer:
        return self.peers[self.index]


#: stands for the companion's data folder in its argv and setup commands (the
#: agent decides the path: as root it runs the companion as a user of its own,
#: and gives it a path that user can reach)
COMPANION_DATA = "{data}"


@dataclass(frozen=True)
class Companion:
    """A server a member needs beside its own process, started first on the
    same host (kine's PostgreSQL). Its data is ``folder`` under the member's
    data folder (measured, archived and removed with it); ``setup`` runs once
    before it on that empty folder (initdb), ``files`` are then written into
    it; it serves when ``ready`` (host, port) accepts connections.
    ``unprivileged``: a server that refuses to run as root (a root agent
    then runs it as a user of its own, agent/companion.py). It is sampled on
    its own, and faults with ``member: database`` act on it."""

    name: str
    argv: list[str]
    ready: tuple[str, int]
    folder: str = "companion"
    setup: tuple[list[str], ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)
    unprivileged: bool = False


#: reads a member's database size: given a timeout in seconds, (bytes of its
#: database file, bytes of it holding live data), or None when the member does
#: not say (paused, starting, stopped)
SizeProbe = Callable[[float], tuple[int, int] | None]


@dataclass(frozen=True)
class LaunchPlan:
    """How to start a member: an argv list (never a shell string), files to write
    first, extra environment, and a companion server started before it."""

    argv: list[str]
    files: Mapping[Path, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    companion: Companion | None = None


@dataclass(frozen=True)
class TlsFiles:
    """PEM files on this machine: the CA a client trusts, and the certificate
    and key it presents (mutual TLS; None: none). ``server_name``: the name
    the members' certificates must carry (None: each address as dialled)."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None

    def pem(self) -> tuple[bytes, bytes | None, bytes | None]:
        """The CA, certificate and key as bytes (None where not given)."""
        return (
            self.ca.read_bytes(),
            self.cert.read_bytes() if self.cert else None,
            self.key.read_bytes() if self.key else None,
        )


@dataclass(frozen=True)
class Access:
    """How a client reaches a database's members: over TLS (``tls``; None:
    plaintext) and as a user (``user`` with ``secret``, a password or token;
    empty: anonymous). The secret never shows in a repr."""

    tls: TlsFiles | None = None
    user: str = ""
    secret: str = field(default="", repr=False)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


#: a plaintext, anonymous client
PLAIN = Access()


@dataclass(frozen=True)
class LoadSettings:
    """How the load reaches a database: what seeding, the load engine and key
    counting need to know."""

    endpoints: tuple[str, ...]  # host:port of each member's client port
    client: Mapping[str, Any]  # the kind's client options (model_dump)
    key_size: int
    value_size: int
    consistency: Literal["linearizable", "serializable"]
    timeout_s: float
    same_key: bool = False
    access: Access = PLAIN

    @property
    def value(self) -> bytes:
        return b"v" * self.value_size


def version_numbers(version: str) -> tuple[int, ...]:
    """A version's leading numbers, for ordering: 3.5.17 -> (3, 5, 17)."""
    found = []
    for part in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        found.append(int(digits))
    return tuple(found)


def size_text(size: float) -> str:
    """A database's or a snapshot's size for people: ``48 KB``, ``1.1 MB``."""
    if size < 1e6:
        return f"{size / 1e3:.0f} KB"
    return f"{size / 1e6:.1f} MB"


class EventFailed(Exception):  # noqa: N818 - a fault's reason, recorded, not a user error
    """A maintenance event could not run; the message says why."""


@dataclass(frozen=True)
class EventCall:
    """What a maintenance event acts on: the members (``members``, indices in
    ``peers``, in order; empty for the whole cluster), the leader when known,
    and the event's own settings."""

    peers: tuple[Peer, ...]
    members: tuple[int, ...] = ()
    leader: int | None = None
    keep_revisions: int = 0
    timeout_s: float = 120.0
    access: Access = PLAIN


def transfer_ends(call: EventCall) -> tuple[int, int]:
    """A leader transfer's (leader, new leader); EventFailed when there is
    no leader, or the new one leads already."""
    (target,) = call.members
    if call.leader is None:
        raise EventFailed("no member leads: there is no leadership to transfer")
    if target == call.leader:
        raise EventFailed(f"member {target} leads already")
    return call.leader, target


class DatabaseKind(ABC):
    """A kind of database (etcd, zookeeper, consul, kine); stateless, one instance each."""

    name: ClassVar[str]
    #: named ports a member listens on, with the standard numbers; "client" is
    #: what the load generator connects to
    default_ports: ClassVar[Mapping[str, int]]
    flags_model: ClassVar[type[Options]]
    client_model: ClassVar[type[Options]]
    #: the wire protocol the load engine speaks to this kind
    protocol: ClassVar[str]
    #: whether the load engine can watch this kind's keys (type: watch)
    watches: ClassVar[bool] = False
    #: what a watch load's table should say of how this kind's watchers work
    #: (a note under the table; empty: nothing to say)
    watch_note: ClassVar[str] = ""
    #: the maintenance events (config.faults.EVENTS) this kind can run during
    #: a load, through run_event
    events: ClassVar[frozenset[str]] = frozenset()
    #: what stands for each event it cannot run, in its own terms (the docs'
    #: table of events says it)
    event_notes: ClassVar[Mapping[str, str]] = {}
    #: the engine's outcome for a read of a key that is not there, where it
    #: is a failure of its own ("": a read that finds nothing is ok, etcd's);
    #: a mixed load's reads that get it, of keys known written, were stale
    not_found: ClassVar[str] = ""
    #: what a load may ask that this kind cannot do (Workload.needs' names:
    #: ``serializable``, ``read_modify_write``, ``kubernetes``), each with the reason
    cannot: ClassVar[Mapping[str, str]] = {}
    #: the most members a database of this kind may have (None: MAX_MEMBERS),
    #: and why; the default member count follows it
    max_members: ClassVar[int | None] = None
    members_note: ClassVar[str] = ""
    #: whether dbtester can start this kind's members with TLS (``tls: true``)
    #: and reach members over it (``tls:`` files with ``endpoints``)
    tls: ClassVar[bool] = False
    #: the test case's ``auth:`` keys for this kind (None: no auth yet)
    auth_model: ClassVar[type[AuthKeys] | None] = None

    @property
    def client_port(self) -> int:
        return self.default_ports["client"]

    def ports(self, flags: Options) -> Mapping[str, int]:
        """The named ports a member with ``flags`` listens on (a kine member
        on PostgreSQL has its database's too): ``default_ports`` by default."""
        return self.default_ports

    def companion(self, flags: Options) -> str | None:
        """The name of the server member 0 runs beside it with ``flags``
        (``LaunchPlan.companion``; faults with ``member: database`` reach it),
        or None: none, by default."""
        return None

    def first_serves_first(self, flags: Options) -> bool:
        """Whether member 0 must serve before the others start (kine's
        members sharing one PostgreSQL: the first makes the tables, and two
        making them at once fail). False by default: all start at once."""
        return False

    def quorum(self, members: int) -> int:
        """How many of ``members`` must run for the database to answer: a
        majority (Raft, Zab). A cluster with fewer is not asked again and
        again for its keys."""
        return members // 2 + 1

    def members_limit(self, flags: Options) -> tuple[int | None, str]:
        """The most members a database with ``flags`` may have (None: no
        limit of the kind's own), and why: ``max_members`` by default."""
        return self.max_members, self.members_note

    @abstractmethod
    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        """The command line and config files for ``member``."""

    def size_probe(self, member: MemberSpec) -> SizeProbe | None:
        """How the agent's sampler reads ``member``'s database size each
        second, beside its data directory's (etcd: dbSize and dbSizeInUse);
        None: the kind does not report one, by default."""
        return None

    def engine_target(self, settings: LoadSettings) -> dict[str, Any]:
        """The load engine's view of this kind: its wire ``protocol`` (one of the
        engine's: etcd, zookeeper, consul), the endpoints and the client options.
        The kind's ``client_model`` options are the engine's options as they
        are, each one given."""
        # Through the kind's client model: every option the engine reads is
        # given, each default taken from that model (the only place it is set).
        options = self.client_model.model_validate(dict(settings.client)).model_dump()
        target: dict[str, Any] = {
            "protocol": self.protocol,
            "endpoints": list(settings.endpoints),
            "options": options,
        }
        if settings.access.secret:
            target["auth"] = self.engine_auth(settings.access)
        return target

    def engine_auth(self, access: Access) -> dict[str, str]:
        """The engine's ``auth`` for this kind: a user and password by default."""
        return {"user": access.user, "password": access.secret}

    def create_user(self, peers: Sequence[Peer], access: Access) -> None:
        """Make ``access``'s user on this fresh cluster and turn its
        authentication on (``auth:`` on members dbtester starts);
        DbtesterError when the cluster refuses. Kinds with an ``auth_model``
        implement it."""
        raise NotImplementedError(f"{self.name} has no users")

    def cannot_with(self, client: Options) -> Mapping[str, str]:
        """What a load may not ask of this kind with ``client`` settings:
        ``cannot``, and what the settings rule out (NATS: serializable reads
        on a bucket without direct gets)."""
        return self.cannot

    def session_ttl_bounds(self, flags: Options) -> tuple[int, int] | None:
        """The session (lease) TTLs in whole seconds its servers honour with
        ``flags``, lowest and highest (None: it has no sessions, or takes any)."""
        return None

    def prepare(self, settings: LoadSettings) -> str | None:
        """Make what the load needs on a cluster that serves, before any key
        is written (NATS: its KV bucket), and say what in a few words (None:
        nothing to make). DbtesterError when the cluster refuses."""
        return None

    def fit_flags(self, flags: Options, connections: int) -> tuple[Options, str | None]:
        """``flags`` adjusted so that each member takes ``connections`` client
        connections from one machine, and a note saying what changed (None when
        nothing did). A ValueError says why the test case cannot fit."""
        return flags, None

    def setup_note(self, flags: Options, client: Options, members: int) -> str | None:
        """What of this database's settings a reader of its figures must know
        (a note under the table), or None."""
        return None

    def session_note(self, client: Options) -> str | None:
        """What a load whose clients hold sessions (a lock load) must know of
        this kind's sessions, with its client settings (None: nothing)."""
        return None

    def load_note(self, clients: int, connections: int) -> str | None:
        """What ``clients`` and ``connections`` meant for this kind's protocol,
        when the table alone would mislead (None when they mean the usual)."""
        return None

    @abstractmethod
    def prefill(
        self, settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
    ) -> None:
        """Write ``count`` keys of ``value_size`` bytes (util.keys.prefill_key),
        apart from the load's keys so that verification does not count them,
        in the kind's largest batches; ``advance`` is told how many after each.
        Raises DbtesterError when a batch fails."""

    @abstractmethod
    def count_keys(self, settings: LoadSettings, prefix: bytes = PREFIX) -> int:
        """How many keys start with ``prefix``: the load generator's keys by
        default, Kubernetes' objects (``/registry/<resource>/``) on the kinds
        that have them (verification); PermissionError when the database
        refuses the user (not retried)."""

    def _only_load_keys(self, prefix: bytes) -> None:
        """A kind that counts only the load generator's keys refuses another
        prefix (validate refuses the workloads that would ask)."""
        if prefix != PREFIX:
            raise NotImplementedError(f"{self.name} counts only the load's keys, not {prefix!r}")

    @abstractmethod
    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """The index in ``peers`` of the member that leads the cluster now; None
        while none does (an election) or when no member answers. A scheduled
        fault on ``member: leader`` asks this at the moment of the fault."""

    def upgrade_refusal(self, running: str, to: str) -> str | None:
        """Why a member running ``running`` may not be restarted on its data
        as ``to`` (the kind's own upgrade rules), or None when it may. The
        default refuses only the same version and a step down."""
        if running == to:
            return f"it runs {to} already"
        if version_numbers(to) < version_numbers(running):
            return f"{to} is older: a downgrade is no upgrade"
        return None

    def tls_refusal(self, version: str, started: bool, server_name: str | None) -> str | None:
        """Why this kind at ``version`` cannot use the test case's TLS
        (``started``: members dbtester starts with ``tls: true``; else
        endpoints reached with files and ``server_name``), or None. Kinds
        with ``tls`` refine it; the default refuses nothing."""
        return None

    def run_event(self, event: str, call: EventCall) -> str:
        """Run maintenance ``event`` (one of ``events``) on the cluster, while
        the load goes on, and say what it did in a few words; EventFailed
        when it could not."""
        raise EventFailed(f"{self.name} has no {event}")

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """Whether ``peer`` accepts clients; kinds refine this with a health call."""
        return tcp_open(peer.host, peer.ports["client"], timeout)

    def default_description(self, version: str) -> str:
        return f"{self.name} v{version}"

    @abstractmethod
    def install_sources(self, version: str) -> list[Source]:
        """The ways to obtain ``version``, most preferred first."""

    def released_versions(self) -> list[str]:
        """Every released version ``install`` may be able to get, in any order
        (``bisect`` lists the range between two from it); SourceUnavailable
        when the list cannot be had. The default knows none."""
        return []

    def verify_install(self, entry: Mapping[str, str], version: str) -> None:  # noqa: B027
        """Check what a source produced; raise SourceUnavailable if it is wrong.
        Optional: kinds whose binaries report their version override it."""

    def install(self, version: str, reporter: Reporter | None = None) -> Installed:
        """Install ``version`` (instant when already installed); InstallError if no
        source can provide it."""
        return ensure_installed(
            self.name,
            version,
            self.install_sources(version),
            reporter,
            verify=lambda entry: self.verify_install(entry, version),
        )

    def convert_legacy_flags(self, old: Mapping[str, Any]) -> LegacyFlags:
        """Map the original dbtester's per-database option block to this kind's
        ``flags``."""
        return {}, [(key, f"'{key}' has no equivalent for {self.name}; dropped") for key in old]


def reported_version(argv: list[str], pattern: str) -> str:
    """Run ``argv`` (e.g. ``etcd --version``) and return the version its output
    matches with ``pattern`` (one group); SourceUnavailable if it does not run."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceUnavailable(f"'{' '.join(argv)}' did not run: {exc}") from None
    found = re.search(pattern, result.stdout + result.stderr)
    if result.returncode != 0 or found is None:
        raise SourceUnavailable(f"'{' '.join(argv)}' printed no version")
    return found.group(1)


def go_arch() -> str:
    """This machine's architecture as Go and release archives name it."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
