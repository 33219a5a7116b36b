"""The test-case model: typed, frozen, strict (the README documents every key).

Each database entry's ``flags`` and ``client`` are validated by its kind's own
models (``dbtester/databases/<kind>.py``): the entry is a tagged union on
``kind``, built from the registry, so adding a kind adds a member here without
editing this file.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from dbtester.config.faults import (
    MAX_AT_S,
    VERSION_PATTERN,
    Fault,
    check_client_faults,
    check_companions,
    check_events,
    check_isolation,
    check_schedule,
    check_upgrades,
    check_within_load,
    parse_duration,
)
from dbtester.config.search import SEARCH_SETS, Search
from dbtester.databases import KINDS, Options
from dbtester.errors import PublishInputError
from dbtester.publish.destination import destination_problem, parse_public_url
from dbtester.util.net import is_loopback
from dbtester.util.paths import from_the_case
from dbtester.workloads import MIN_MIXED_VALUE_SIZE, TYPES, AnyWorkload, Workload
from dbtester.workloads.base import KeyValueError

__all__ = [
    "DEFAULT_FAULT_RECOVERY_S",
    "ENDPOINT_PATTERN",
    "HOST_PATTERN",
    "ID_PATTERN",
    "MAX_LOAD_HOSTS",
    "MIN_MIXED_VALUE_SIZE",
    "SCHEMA_KEYS",
    "UNION_TAGS",
    "VERSION_PATTERN",
    "DatabaseSpec",
    "Host",
    "Publish",
    "TestCase",
    "TlsFiles",
    "Workload",
    "spread_problem",
]

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# Letters, digits and . _ + ~ - only: a version reaches command lines and paths,
# so shell metacharacters and slashes are refused here already.
#: at most this many load hosts share a load
MAX_LOAD_HOSTS = 64
ENDPOINT_PATTERN = r"^[A-Za-z0-9.\[\]:-]+:[0-9]{1,5}$"
HOST_PATTERN = r"^[A-Za-z0-9.:\[\]-]+$"
USER_PATTERN = r"^[a-z_][a-z0-9_.-]{0,31}$"
#: a DNS name or an IP address, as a certificate names a server
SERVER_NAME_PATTERN = r"^[A-Za-z0-9.:*-]{1,253}$"
AGENT_DIR_PATTERN = r"^[A-Za-z0-9._/-]+$"
MAX_MEMBERS = 9
#: trials per database
MAX_REPEAT = 100
#: repeat: auto's default bound on trials
DEFAULT_MAX_TRIALS = 20
#: the keys that mean something for repeat: auto only
AUTO_ONLY_KEYS = ("max_trials", "time_budget", "equivalence", "stopping_metrics")
#: repeat: auto's first look (analyze.sequential.MIN_TRIALS; a test checks they agree)
MIN_AUTO_TRIALS = 3
#: interleave: slices: each slice's length by default, seconds
DEFAULT_SLICE_S = 5.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Host(_Model):
    """A server machine running ``dbtester agent serve``; the ssh_* and agent_dir
    keys are for ``dbtester agents up|down|status``."""

    address: str = Field(
        min_length=1, pattern=HOST_PATTERN, description="The server's address (name or IP)"
    )
    agent_port: int = Field(3500, ge=1, le=65535, description="The agent's gRPC port")
    ssh_port: int = Field(22, ge=1, le=65535, description="SSH port, for `dbtester agents`")
    ssh_user: str | None = Field(
        None, pattern=USER_PATTERN, description="SSH user (unset: --ssh-user, else $USER)"
    )
    agent_dir: str = Field(
        "dbtester-agent",
        pattern=AGENT_DIR_PATTERN,
        description="Where `agents up` puts the agent's venv, config, token and data"
        " (relative: to the home directory)",
    )

    @field_validator("agent_dir")
    @classmethod
    def _safe_dir(cls, value: str) -> str:
        # `agents down` removes what it put there; never let that be "/" or a home.
        parts = [p for p in value.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise ValueError(f"agent_dir {value!r} must name a directory below / or the home dir")
        return value


class Publish(_Model):
    """Where ``dbtester run`` uploads its results once every database passed."""

    url: str = Field(
        min_length=1,
        description="gs://BUCKET/PREFIX, s3://BUCKET/PREFIX, file:///PATH or an absolute path",
    )
    public_url: str | None = Field(
        None, description="Where readers fetch the files (unset: the bucket's public URL)"
    )

    # The rules live with the code that publishes: one place for both this check
    # and `dbtester publish`.
    @field_validator("url")
    @classmethod
    def _publishable(cls, url: str) -> str:
        if problem := destination_problem(url):
            raise ValueError(problem)
        return url

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return parse_public_url(value)
        except PublishInputError as exc:
            raise ValueError(str(exc)) from None


class TlsFiles(_Model):
    """An already-running cluster's TLS: PEM files on the machine that runs
    dbtester (a relative path is taken from the test case's folder)."""

    ca: str = Field(
        min_length=1, description="The CA certificate(s) the members' certificates chain to"
    )
    cert: str | None = Field(
        None, min_length=1, description="The client certificate to present (mutual TLS)"
    )
    key: str | None = Field(None, min_length=1, description="The client certificate's private key")
    server_name: str | None = Field(
        None,
        pattern=SERVER_NAME_PATTERN,
        description="The name the members' certificates carry (unset: each endpoint's host)",
    )

    @model_validator(mode="after")
    def _cert_with_key(self) -> Self:
        if (self.cert is None) != (self.key is None):
            raise ValueError("give cert and key together (a client certificate needs its key)")
        return self

    @field_validator("ca", "cert", "key")
    @classmethod
    def _from_the_case(cls, value: str | None, info: ValidationInfo) -> str | None:
        return from_the_case(value, info.context)


def _tls_form(value: Any) -> str:
    return "files" if isinstance(value, dict | TlsFiles) else "switch"


#: ``tls: true`` or the files; the tag keeps pydantic from reporting a mapping's
#: mistakes against ``true`` too (config.load drops these tags from locations)
TlsSetting = Annotated[
    Annotated[bool, Tag("switch")] | Annotated[TlsFiles, Tag("files")],
    Discriminator(_tls_form),
]
UNION_TAGS = frozenset({"switch", "files"})


class DatabaseSpec(_Model):
    """One column of the results table: a database kind at a version, with settings."""

    id: str = Field(
        pattern=ID_PATTERN,
        max_length=64,
        description="Unique; names the table column and the results folder",
    )
    kind: str = Field(description=f"The database kind: {', '.join(KINDS)}")
    version: str = Field(
        pattern=VERSION_PATTERN, description='The version to run; a string: quote "3.5"'
    )
    description: str = Field("", description="The column heading (default: the id)")
    members: int = Field(
        3, ge=1, le=MAX_MEMBERS, description="Members on this machine (with hosts: one per host)"
    )
    hosts: Annotated[tuple[Host, ...], Field(strict=False)] = Field(
        (), description="Servers running agents, one per member (see the host keys)"
    )
    endpoints: Annotated[
        tuple[Annotated[str, Field(pattern=ENDPOINT_PATTERN)], ...],
        Field(strict=False),
    ] = Field(
        (),
        description="An already-running cluster's client addresses (HOST:PORT): load only,"
        " no agents",
    )
    flags: Options = Field(Options(), description="The kind's server settings (below)")
    client: Options = Field(Options(), description="The kind's client settings (below)")
    tls: TlsSetting = Field(
        False,
        description="true: the members dbtester starts serve clients and peers over TLS,"
        " with certificates made for the run; with endpoints: the files to reach them"
        " (the tls keys)",
    )
    auth: Options | None = Field(
        None,
        description="Connect as a user, its secret from the environment or a file (the"
        " kind's auth keys, below); on members dbtester starts, it creates the user",
    )
    workload: AnyWorkload = Field(
        description="Workload keys to override for this database only",
        # The loader fills it in from the test case's workload.
        json_schema_extra={"doc_default": "the test case's"},
    )

    @model_validator(mode="after")
    def _placement(self) -> Self:
        if self.hosts and self.endpoints:
            raise ValueError(
                "give hosts (agents start the database) or endpoints (an already-running"
                " cluster), not both"
            )
        kind = KINDS[self.kind]
        most, why = kind.members_limit(self.flags)
        count = len(self.hosts) or (0 if self.endpoints else self.members)
        if most is not None and count > most:
            # members may follow flags in the file: the limit can depend on them
            key = "hosts" if self.hosts else "members"
            raise KeyValueError(key, _too_many(kind.name, most, why, count))
        if self.hosts and "members" in self.model_fields_set and self.members != len(self.hosts):
            raise ValueError(
                f"members ({self.members}) differs from the number of hosts ({len(self.hosts)})"
            )
        return self

    @field_validator("tls")
    @classmethod
    def _tls_fits(cls, tls: bool | TlsFiles, info: ValidationInfo) -> bool | TlsFiles:
        # A field validator (kind and endpoints come first): the error points at tls.
        kind, endpoints = info.data.get("kind"), info.data.get("endpoints", ())
        if tls is False or kind not in KINDS:
            return tls
        if not KINDS[kind].tls:
            able = ", ".join(name for name, each in KINDS.items() if each.tls)
            raise ValueError(f"dbtester cannot reach {kind} over TLS yet (it can: {able})")
        if tls is True and endpoints:
            raise ValueError(
                "tls: true makes certificates for members dbtester starts; for endpoints give"
                " the files: tls: {ca: ..., cert: ..., key: ...}"
            )
        if tls is not True and not endpoints:
            raise ValueError(
                "tls files are for endpoints (a cluster dbtester does not run); for the"
                " members dbtester starts write tls: true"
            )
        server_name = tls.server_name if isinstance(tls, TlsFiles) else None
        why = KINDS[kind].tls_refusal(info.data.get("version", ""), tls is True, server_name)
        if why:
            raise ValueError(why)
        return tls

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_known(cls, auth: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("kind")
        if auth is not None and kind in KINDS and KINDS[kind].auth_model is None:
            able = ", ".join(name for name, each in KINDS.items() if each.auth_model)
            raise ValueError(f"dbtester cannot authenticate to {kind} yet (it can: {able})")
        return auth

    @field_validator("workload")
    @classmethod
    def _kind_can_run_it(cls, workload: Workload, info: ValidationInfo) -> Workload:
        # A field validator (kind comes first); the error points at the key that asks.
        kind = KINDS.get(str(info.data.get("kind")))
        if kind is None:
            return workload
        client = info.data.get("client")
        cannot = kind.cannot_with(client) if isinstance(client, Options) else kind.cannot
        for capability, key in workload.needs():
            if capability in cannot:
                raise KeyValueError(key, f"{key}: {kind.name} cannot: {cannot[capability]}")
        flags = info.data.get("flags")
        bounds = kind.session_ttl_bounds(flags) if isinstance(flags, Options) else None
        ttl = workload.session_ttl_s
        if ttl is not None and bounds is not None and not bounds[0] <= ttl <= bounds[1]:
            raise KeyValueError(
                "ttl",
                f"ttl: {kind.name}'s servers here keep sessions of {bounds[0]:,} to"
                f" {bounds[1]:,} s (its flags set them), not {ttl:g} s",
            )
        return workload

    @model_validator(mode="after")
    def _can_run_its_workload(self) -> Self:
        if self.workload.WATCHES and not KINDS[self.kind].watches:
            able = ", ".join(name for name, kind in KINDS.items() if kind.watches)
            raise ValueError(
                f"kind {self.kind} cannot run type: {self.workload.type} yet (the load engine"
                f" watches: {able})"
            )
        return self

    @property
    def label(self) -> str:
        """The column heading: the description, or the id."""
        return self.description or self.id

    @property
    def member_count(self) -> int:
        return len(self.hosts) or len(self.endpoints) or self.members

    @property
    def embedded(self) -> bool:
        """True when this machine runs the members (no hosts, no endpoints)."""
        return not self.hosts and not self.endpoints


def _spec_for(name: str) -> type[DatabaseSpec]:
    kind = KINDS[name]
    fields: dict[str, Any] = {
        "kind": (Literal[name], ...),
        "flags": (kind.flags_model, kind.flags_model()),
        "client": (kind.client_model, kind.client_model()),
    }
    if kind.auth_model is not None:
        fields["auth"] = (kind.auth_model | None, None)
    if kind.max_members is not None:
        fields["members"] = (
            int,
            Field(
                kind.max_members,
                ge=1,
                le=MAX_MEMBERS,
                description=f"At most {kind.max_members}"
                + (f" ({kind.members_note})" if kind.members_note else ""),
            ),
        )
    return create_model(f"{kind.__class__.__name__}Spec", __base__=DatabaseSpec, **fields)


def _too_many(kind: str, most: int, why: str, members: int) -> str:
    plural = "s" if most != 1 else ""
    return f"{kind} takes at most {most} member{plural}, not {members}: {why}"


SPECS: dict[str, type[DatabaseSpec]] = {name: _spec_for(name) for name in KINDS}
if TYPE_CHECKING:
    AnySpec = DatabaseSpec
else:  # a tagged union of the per-kind specs, discriminated by ``kind``
    AnySpec = Annotated[Union[tuple(SPECS.values())], Field(discriminator="kind")]  # noqa: UP007


#: the default of the test case's ``fault_recovery`` (seconds)
DEFAULT_FAULT_RECOVERY_S = 30.0


class TestCase(_Model):
    """A whole test case: one workload run against every database, in order."""

    __test__ = False  # not a pytest class, despite the name

    title: str = Field(min_length=1, description="Heads the table, the README and the report")
    description: str = Field("", description="Free text, shown above the table")
    workload: AnyWorkload = Field(description="What the load does (the workload keys)")
    databases: Annotated[tuple[AnySpec, ...], Field(strict=False, min_length=1)] = Field(
        description="One column of the table each, run in this order (the database keys)"
    )
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] | Literal["auto"] = Field(
        1,
        description="Trials per database, interleaved (A1 B1 A2 B2 ...), each on a fresh"
        " cluster; auto: until the stopping metrics are decided",
    )
    interleave: Literal["trials", "slices"] = Field(
        "trials",
        description="trials: each database in turn, each trial on a fresh cluster; slices:"
        " every database's cluster up at once and the load alternating between them in"
        " slices of slice_s, in a random order each round, each slice a trial",
    )
    slice_s: float = Field(
        DEFAULT_SLICE_S,
        gt=0,
        le=600,
        description="interleave: slices: each slice's length, seconds or a duration like 10s",
    )
    max_trials: int = Field(
        DEFAULT_MAX_TRIALS,
        ge=MIN_AUTO_TRIALS,
        le=MAX_REPEAT,
        description="repeat: auto: at most this many trials per database",
    )
    time_budget: float | None = Field(
        None,
        gt=0,
        le=MAX_AT_S,
        description="repeat: auto: no new round of trials starts once this long has passed"
        " since the first began, after the first look (3 rounds): seconds or a duration"
        " like 90m (unset: no limit)",
    )
    equivalence: float = Field(
        5.0,
        gt=0,
        le=100,
        description="repeat: auto: a change whose interval lies inside ± this many percent is"
        " decided as equivalent",
    )
    stopping_metrics: Annotated[tuple[str, ...], Field(strict=False, min_length=1)] = Field(
        ("AVG-THROUGHPUT", "Latency p99"),
        description="repeat: auto: the table rows that must be decided before the trials stop",
    )
    faults: Annotated[tuple[Fault, ...], Field(strict=False, max_length=100)] = Field(
        (),
        description="Faults applied to every database's cluster during its load (the fault keys)",
    )
    fault_recovery: float = Field(
        DEFAULT_FAULT_RECOVERY_S,
        gt=0,
        le=MAX_AT_S,
        description="With faults: a load in which no request succeeds for this long stops and"
        " fails (the cluster did not recover); a duration like 30s",
    )
    search: Search | None = Field(
        None,
        description="Find the highest rate each database sustains within a latency target"
        " instead of loading it at one rate (the search keys)",
    )
    load_hosts: Annotated[tuple[Host, ...], Field(strict=False, max_length=MAX_LOAD_HOSTS)] = Field(
        (),
        description="Client machines running agents that share the measured load (the host"
        " keys; unset: this machine alone)",
    )
    publish: Publish | None = Field(
        None, description="Upload the results here when every database passed (the publish keys)"
    )

    _recovery = field_validator("fault_recovery", mode="before")(parse_duration)
    _budget = field_validator("time_budget", mode="before")(parse_duration)
    _slice = field_validator("slice_s", mode="before")(parse_duration)

    @field_validator("interleave")
    @classmethod
    def _sliceable(cls, value: str, info: ValidationInfo) -> str:
        if value != "slices":
            return value
        databases: tuple[DatabaseSpec, ...] = info.data.get("databases", ())
        if len(databases) < 2:
            raise ValueError("slices alternate the load between databases: give at least two")
        for db in databases:
            if why := slices_refusal(db.workload):
                raise ValueError(f"database {db.id}: {why}")
        owner: dict[str, str] = {}
        for db in databases:
            for host in {h.address for h in db.hosts}:
                if host in owner:
                    raise ValueError(
                        f"databases {owner[host]} and {db.id} both run on {host}: with slices"
                        " every cluster is up at once, and their ports would collide"
                    )
                owner[host] = db.id
        return value

    @field_validator("search")
    @classmethod
    def _search_alone(cls, value: Search | None, info: ValidationInfo) -> Search | None:
        if value is not None and info.data.get("interleave") == "slices":
            raise ValueError(
                "a search probes rates on one cluster at a time: interleave trials (remove"
                " interleave: slices) to search"
            )
        return value

    @field_validator("slice_s")
    @classmethod
    def _only_with_slices(cls, value: float, info: ValidationInfo) -> float:
        if info.data.get("interleave") != "slices":
            raise ValueError("slice_s is for interleave: slices only; remove it")
        return value

    @field_validator(*AUTO_ONLY_KEYS)
    @classmethod
    def _only_with_auto(cls, value: Any, info: ValidationInfo) -> Any:
        repeat = info.data.get("repeat")
        if repeat is not None and repeat != "auto":
            raise ValueError(
                f"{info.field_name} is for repeat: auto only (repeat is {repeat}); remove it"
            )
        return value

    @field_validator("stopping_metrics")
    @classmethod
    def _known_metrics(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        # Only when the key is given: validating a test case must not load the
        # analysis (pandas, scipy) for a list of names.
        from dbtester.analyze.stats import METRICS

        unknown = [n for n in names if n not in METRICS]
        if unknown:
            raise ValueError(
                f"unknown metric {', '.join(map(repr, unknown))}; allowed: {', '.join(METRICS)}"
            )
        return names

    @model_validator(mode="after")
    def _something_to_compare(self) -> Self:
        if self.repeat == "auto" and len(self.databases) < 2:
            raise ValueError(
                "repeat: auto runs trials until each database's difference from the first"
                " is decided: it needs at least two databases (give repeat a number)"
            )
        return self

    def versions_of(self, db: DatabaseSpec) -> list[str]:
        """Every version ``db``'s members run: its own, then each ``upgrade``'s
        ``to:`` (what must be installed where they run)."""
        upgrades = [f.to for f in self.faults if f.action == "upgrade" and f.to]
        return list(dict.fromkeys([db.version, *upgrades]))

    @property
    def trials(self) -> int:
        """The most trials a database may get: ``repeat``, or ``max_trials`` for auto."""
        return self.max_trials if self.repeat == "auto" else self.repeat

    @model_validator(mode="after")
    def _unique_ids(self) -> Self:
        seen: set[str] = set()
        for db in self.databases:
            if db.id in seen:
                raise ValueError(f"database id {db.id!r} is used twice; ids name table columns")
            seen.add(db.id)
        return self

    @field_validator("faults")
    @classmethod
    def _faults_fit(cls, faults: tuple[Fault, ...], info: ValidationInfo) -> tuple[Fault, ...]:
        # A field validator (databases come first, so they are known here): an
        # error points at `faults:` rather than at the top of the file.
        databases: tuple[DatabaseSpec, ...] = info.data.get("databases", ())
        if not faults or not databases:
            return faults
        if info.data.get("interleave") == "slices":
            raise ValueError(
                "faults are applied to one load of a fresh cluster: interleave trials"
                " (remove interleave: slices) to run them"
            )
        loaded = [db.id for db in databases if db.endpoints]
        if loaded:
            raise ValueError(
                f"faults need agents on the members: {', '.join(loaded)} only names"
                " endpoints (a cluster dbtester does not run)"
            )
        check_schedule(faults, min(db.member_count for db in databases))
        check_within_load(
            faults, [(db.id, db.workload.requests, db.workload.rate) for db in databases]
        )
        check_companions(faults, [(db.id, KINDS[db.kind].companion(db.flags)) for db in databases])
        check_events(
            faults,
            [
                (db.id, db.kind, KINDS[db.kind].events, KINDS[db.kind].event_notes)
                for db in databases
            ],
        )
        check_client_faults(faults, [(db.id, db.workload.fault_problem) for db in databases])
        check_upgrades(
            faults,
            [(db.id, db.kind, db.version, KINDS[db.kind].upgrade_refusal) for db in databases],
        )
        for db in databases:
            check_isolation(faults, db.id, [h.address for h in db.hosts])
        return faults

    @field_validator("load_hosts")
    @classmethod
    def _spreadable(cls, hosts: tuple[Host, ...], info: ValidationInfo) -> tuple[Host, ...]:
        # After databases and search, so the error points at `load_hosts:`.
        if not hosts:
            return hosts
        seen = [(h.address, h.agent_port) for h in hosts]
        if len(set(seen)) != len(seen):
            raise ValueError("a load host is listed twice (same address and agent_port)")
        if info.data.get("search") is not None:
            raise ValueError(
                "search probes run on this machine: give load_hosts or search, not both"
            )
        if info.data.get("interleave") == "slices":
            raise ValueError("slices run from this machine: give load_hosts or slices, not both")
        remote = [h.address for h in hosts if not is_loopback(h.address)]
        for db in info.data.get("databases", ()):
            if problem := spread_problem(db.workload, len(hosts)):
                raise ValueError(f"database {db.id}: {problem}")
            if db.embedded and remote:
                raise ValueError(
                    f"database {db.id} runs on this machine's loopback, which load host"
                    f" {remote[0]} cannot reach: give the database hosts or endpoints"
                )
        return hosts

    def _workload_raw(self, workload: Workload) -> dict[str, Any]:
        raw = workload.as_raw()
        if self.search is not None:  # the search sets these itself
            raw = {k: v for k, v in raw.items() if k not in SEARCH_SETS}
        return raw

    def database(self, db_id: str) -> DatabaseSpec:
        for db in self.databases:
            if db.id == db_id:
                return db
        raise KeyError(db_id)

    def to_raw(self) -> dict[str, Any]:
        """Plain data for YAML: the workload in full (a benchmark should say what it
        does), other defaults left out, per-database workloads only where they differ."""
        raw = self.model_dump(mode="json", exclude_defaults=True)
        base = self._workload_raw(self.workload)
        raw["workload"] = base
        for db_raw, db in zip(raw["databases"], self.databases, strict=True):
            own = self._workload_raw(db.workload)
            override = {k: v for k, v in own.items() if base.get(k) != v}
            db_raw.pop("workload", None)
            db_raw["kind"] = db.kind
            if override:
                db_raw["workload"] = override
        return raw


def slices_refusal(workload: Workload) -> str | None:
    """Why ``workload`` cannot be run in slices (None: it can)."""
    if workload.SLICES_REFUSED:
        return f"type: {workload.type}: {workload.SLICES_REFUSED}"
    if workload.client_steps:
        return "client_steps make each trial a sequence of loads; interleave trials"
    return None


def spread_problem(workload: Workload, hosts: int) -> str | None:
    """Why ``workload`` cannot be shared among ``hosts`` load hosts (None: it can)."""
    return workload.spread_problem(hosts)


def version_hint(value: Any) -> str | None:
    """YAML reads ``version: 3.5`` as a number; say how to fix it."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'versions are strings: write version: "{value}" (quoted)'
    if isinstance(value, str) and not re.match(VERSION_PATTERN, value):
        return f"{value!r} is not a version: use letters, digits and . _ + ~ - only (e.g. 3.5.17)"
    return None


# Every key the schema knows, per section, for "did you mean" across sections.
SCHEMA_KEYS: dict[str, tuple[str, ...]] = {
    "": tuple(TestCase.model_fields),
    "workload": tuple(dict.fromkeys(k for cls in TYPES.values() for k in cls.model_fields)),
    "database": tuple(DatabaseSpec.model_fields),
    "host": tuple(Host.model_fields),
    "publish": tuple(Publish.model_fields),
    "tls": tuple(TlsFiles.model_fields),
    "faults": tuple(Fault.model_fields),
    "search": tuple(Search.model_fields),
}
