"""The test-case model: typed, frozen, strict (the README documents every key).

Each database entry's ``flags`` and ``client`` are validated by its kind's own
models (``dbtester/databases/<kind>.py``): the entry is a tagged union on
``kind``, built from the registry, so adding a kind adds a member here without
editing this file.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from dbtester.workloads.check import Check
from dbtester.config.faults import (
    MAX_AT_S,
    Fault,
    check_isolation,
    check_schedule,
    parse_duration,
)
from dbtester.config.search import SEARCH_SETS, Search
from dbtester.databases import KINDS, Options
from dbtester.errors import PublishInputError
from dbtester.publish.destination import destination_problem, parse_public_url
from dbtester.util.keys import KeySpace
from dbtester.util.net import is_loopback

__all__ = [
    "DEFAULT_FAULT_RECOVERY_S",
    "ENDPOINT_PATTERN",
    "HOST_PATTERN",
    "ID_PATTERN",
    "MAX_LOAD_HOSTS",
    "MIN_MIXED_VALUE_SIZE",
    "MIXED_ONLY",
    "READ_ONLY",
    "SCHEMA_KEYS",
    "VERSION_PATTERN",
    "WATCH_ONLY",
    "WRITE_ONLY",
    "DatabaseSpec",
    "Host",
    "Publish",
    "TestCase",
    "Workload",
    "spread_problem",
]

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# Letters, digits and . _ + ~ - only: a version reaches command lines and paths,
# so shell metacharacters and slashes are refused here already.
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}$"
#: at most this many load hosts share a load
MAX_LOAD_HOSTS = 64
ENDPOINT_PATTERN = r"^[A-Za-z0-9.\[\]:-]+:[0-9]{1,5}$"
HOST_PATTERN = r"^[A-Za-z0-9.:\[\]-]+$"
USER_PATTERN = r"^[a-z_][a-z0-9_.-]{0,31}$"
AGENT_DIR_PATTERN = r"^[A-Za-z0-9._/-]+$"
MAX_MEMBERS = 9
WRITE_ONLY = ("sequential_keys", "same_key")
READ_ONLY = ("consistency",)
#: keys only the mixed workload reads
MIXED_ONLY = (
    "key_count",
    "read_proportion",
    "update_proportion",
    "insert_proportion",
    "read_modify_write_proportion",
    "request_distribution",
    "zipfian_constant",
    "hot_set_fraction",
    "hot_operation_fraction",
)
#: keys only the watch workload reads
WATCH_ONLY = ("watchers", "watch_connections")
#: a mixed workload's values name their key and write: 32 bytes of tag
MIN_MIXED_VALUE_SIZE = 32


#: a run's requests: their records take 27 bytes each in the controller's memory
MAX_REQUESTS = 1_000_000_000
#: distinct keys in random order (the engine's bound: 4 bytes of memory each)
MAX_RANDOM_ORDER = 1 << 28
#: trials per database
MAX_REPEAT = 100
#: repeat: auto's default bound on trials
DEFAULT_MAX_TRIALS = 20
#: the keys that mean something for repeat: auto only
AUTO_ONLY_KEYS = ("max_trials", "time_budget", "equivalence", "stopping_metrics")
#: repeat: auto's first look (analyze.sequential.MIN_TRIALS; a test checks they agree)
MIN_AUTO_TRIALS = 3


def _only_for(workload_type: str) -> Any:
    """A validator refusing a key of ``workload_type``'s workloads in any other."""

    def check(cls: type, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is not None and kind != workload_type:
            raise ValueError(
                f"{info.field_name} is for type: {workload_type} only, not {kind}; remove it"
            )
        return value

    return classmethod(check)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Workload(_Model):
    """What the load generator does; shared by every database unless overridden."""

    type: Literal["write", "read", "mixed", "watch"] = Field(
        description="write: distinct keys (or one, with same_key); read: one key, seeded"
        " first, read `requests` times; mixed: YCSB's reads, updates, inserts and"
        " read-modify-writes over `key_count` keys; watch: writes of distinct keys at"
        " `rate` while `watchers` watch them, timing each event"
    )
    requests: int = Field(
        gt=0, le=MAX_REQUESTS, description="Measured requests per trial, shared across client steps"
    )
    key_size: int = Field(
        256, ge=1, le=1 << 20, description="Bytes per key: 'k' and the key's number, zero-padded"
    )
    value_size: int = Field(
        1024, ge=0, le=64 << 20, description="Bytes per value written (mixed: at least 32)"
    )
    sequential_keys: bool = Field(
        True, description="write: keys in order (true) or in a seeded random order (false)"
    )
    same_key: bool = Field(False, description="write: overwrite one key instead of distinct keys")
    clients: int = Field(1000, ge=1, le=100_000, description="Requests in flight at once")
    connections: int = Field(
        100,
        ge=1,
        le=100_000,
        description="gRPC channels, ZooKeeper sessions or HTTP connections; at most `clients`",
    )
    client_steps: Annotated[tuple[Annotated[int, Field(ge=1)], ...], Field(strict=False)] = Field(
        (),
        description="Client counts to step through, increasing (e.g. [1, 10, 100]); the"
        " requests are shared across the steps",
    )
    rate: float = Field(
        0,
        ge=0,
        description="Target requests/s (open loop: latency counts from each request's due"
        " time); 0: as fast as possible",
    )
    consistency: Literal["linearizable", "serializable"] = Field(
        "linearizable", description="read and mixed: the reads' consistency"
    )
    request_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Seconds before a request counts as `timeout`"
    )
    max_error_rate: float = Field(
        0.01,
        ge=0,
        le=1,
        description="The share of requests that may fail before the run stops and fails"
        " (off with faults)",
    )
    warmup_requests: int = Field(
        0,
        ge=0,
        le=MAX_REQUESTS,
        description="Requests made before each trial's measured load, counted in no figure",
    )
    # mixed: YCSB's core workload. A load phase writes key_count keys (not
    # measured), then requests operations are drawn with these shares.
    key_count: int = Field(
        1000,
        ge=1,
        le=MAX_RANDOM_ORDER,
        description="mixed: keys the load phase writes before the measured requests",
    )
    read_proportion: float = Field(0.95, ge=0, le=1, description="mixed: the share of reads")
    update_proportion: float = Field(
        0.05, ge=0, le=1, description="mixed: the share of updates (overwrite an existing key)"
    )
    insert_proportion: float = Field(
        0.0, ge=0, le=1, description="mixed: the share of inserts (create a new key)"
    )
    read_modify_write_proportion: float = Field(
        0.0,
        ge=0,
        le=1,
        description="mixed: the share of atomic read-modify-writes (a lost race: `conflict`);"
        " the four shares add up to 1",
    )
    request_distribution: Literal["uniform", "zipfian", "latest", "hotspot"] = Field(
        "zipfian", description="mixed: how each request's key is chosen"
    )
    zipfian_constant: float = Field(
        0.99,
        gt=0,
        le=10,
        description="zipfian and latest: θ; the key of rank r gets r^-θ / H(n, θ) of the requests",
    )
    hot_set_fraction: float = Field(
        0.2, gt=0, le=1, description="hotspot: the share of the keys that are hot"
    )
    hot_operation_fraction: float = Field(
        0.8, ge=0, le=1, description="hotspot: the share of the requests the hot keys get"
    )
    watchers: int = Field(
        10,
        ge=1,
        le=10_000,
        description="watch: watchers, each watching every key the load writes",
    )
    watch_connections: int = Field(
        1,
        ge=1,
        le=10_000,
        description="watch: connections the watchers share (at most `watchers`)",
    )
    check: Check | None = Field(
        None,
        description="checked clients beside the load, their history checked for"
        " linearizability: {model: linearizability, clients: 8, keys: 8, on_violation: fail};"
        " with type: watch, {model: watch} judges the watchers' events",
    )

    @field_validator("check")
    @classmethod
    def _check_fits_the_type(cls, check: Check | None, info: ValidationInfo) -> Check | None:
        kind = info.data.get("type")
        if check is None or kind is None:
            return check
        if kind == "watch" and check.runs_clients:
            raise ValueError(
                "check with type: watch takes model: watch, which judges the"
                " watchers' events (checked clients' keys would be events the"
                " watchers do not expect)"
            )
        if kind != "watch" and not check.runs_clients:
            raise ValueError(
                f"check's model: watch judges a watch load's watchers, and this is"
                f" type: {kind}: use model: linearizability"
            )
        return check

    @field_validator("sequential_keys", "same_key")
    @classmethod
    def _not_for_mixed(cls, value: bool, info: ValidationInfo) -> bool:
        if info.data.get("type") == "mixed":
            raise ValueError(
                f"{info.field_name} means nothing for type: mixed (its keys are chosen"
                " by request_distribution); remove it"
            )
        return value

    _only_for_mixed = field_validator(*MIXED_ONLY)(_only_for("mixed"))
    _only_for_watch = field_validator(*WATCH_ONLY)(_only_for("watch"))

    @field_validator("value_size")
    @classmethod
    def _room_for_the_tag(cls, value: int, info: ValidationInfo) -> int:
        if info.data.get("type") == "mixed" and value < MIN_MIXED_VALUE_SIZE:
            raise ValueError(
                f"value_size must be at least {MIN_MIXED_VALUE_SIZE} for type: mixed"
                f" (each value names its key and the write that made it), got {value}"
            )
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _ignore_other_types_keys(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """A read's write-only keys (and a write's read-only ones) are checked,
        then not kept: they mean nothing for it, the loader warns of them, and
        the workload is then what runs (and what `convert` writes back)."""
        workload = handler(data)
        ignored = {"read": WRITE_ONLY, "write": READ_ONLY, "watch": READ_ONLY}.get(
            workload.type, ()
        )
        if not isinstance(data, dict) or not set(ignored) & workload.model_fields_set:
            return workload
        return handler({k: v for k, v in data.items() if k not in ignored})

    @field_validator("client_steps")
    @classmethod
    def _steps_increase(cls, steps: tuple[int, ...]) -> tuple[int, ...]:
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError(f"client_steps must increase strictly, got {list(steps)}")
        return steps

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.connections > self.clients:
            raise ValueError(
                f"connections ({self.connections}) must not exceed clients ({self.clients}):"
                " a connection without a client would sit idle"
            )
        if self.client_steps and len(self.client_steps) > self.requests:
            raise ValueError(
                f"requests ({self.requests}) must be at least the number of client_steps"
                f" ({len(self.client_steps)}): the requests are shared across the steps"
            )
        if self.type == "watch":
            self._check_watch()
        writes = self.writes_keys
        random_order = writes and not (self.same_key or self.sequential_keys)
        if random_order and max(self.requests, self.warmup_requests) > MAX_RANDOM_ORDER:
            name = "requests" if self.requests > MAX_RANDOM_ORDER else "warmup_requests"
            raise ValueError(
                f"{name} ({max(self.requests, self.warmup_requests):,}) must be at most"
                f" {MAX_RANDOM_ORDER:,} with sequential_keys: false (the random order is"
                " held in memory, 4 bytes a key)"
            )
        if writes and not self.same_key:
            # Keys are "k" + the request number, zero-padded to key_size bytes; a
            # warm-up writes the numbers after the load's.
            distinct = KeySpace.capacity(self.key_size)
            needed = self.requests + self.warmup_requests
            if needed > distinct:
                what = (
                    f"requests + warmup_requests ({needed:,})"
                    if self.warmup_requests
                    else f"requests ({needed:,})"
                )
                raise ValueError(
                    f"key_size {self.key_size} holds {distinct:,} distinct keys ('k' and"
                    f" {self.key_size - 1} digits), fewer than {what}:"
                    " raise key_size or set same_key"
                )
        if self.type == "mixed":
            self._check_mix()
        if self.client_steps and self.client_steps[-1] > self.clients:
            raise ValueError(
                f"the largest client step ({self.client_steps[-1]}) exceeds clients"
                f" ({self.clients})"
            )
        return self

    def _check_watch(self) -> None:
        if self.rate <= 0:
            raise ValueError(
                "type: watch needs rate above 0: events are timed against puts sent at a"
                " steady rate (open loop)"
            )
        if self.same_key:
            raise ValueError(
                "same_key cannot be used with type: watch: each put writes a key of its own,"
                " so each event names the put it reports"
            )
        if self.client_steps:
            raise ValueError("client_steps cannot be used with type: watch; remove it")
        if self.watch_connections > self.watchers:
            raise ValueError(
                f"watch_connections ({self.watch_connections}) must not exceed watchers"
                f" ({self.watchers})"
            )

    def _check_mix(self) -> None:
        shares = (
            self.read_proportion,
            self.update_proportion,
            self.insert_proportion,
            self.read_modify_write_proportion,
        )
        if abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(
                "read_proportion, update_proportion, insert_proportion and"
                " read_modify_write_proportion must add up to 1, got"
                f" {' + '.join(f'{s:g}' for s in shares)} = {sum(shares):g}"
            )
        inserts = math.ceil(self.insert_proportion * (self.requests + self.warmup_requests))
        needed = self.key_count + self.requests + self.warmup_requests
        if inserts and needed > KeySpace.capacity(self.key_size):
            raise ValueError(
                f"key_size {self.key_size} holds {KeySpace.capacity(self.key_size):,} distinct"
                f" keys, fewer than key_count + requests + warmup_requests ({needed:,}) that"
                " inserts may need: raise key_size"
            )
        if self.key_count > KeySpace.capacity(self.key_size):
            raise ValueError(
                f"key_size {self.key_size} holds {KeySpace.capacity(self.key_size):,} distinct"
                f" keys, fewer than key_count ({self.key_count:,}): raise key_size"
            )

    @property
    def writes_keys(self) -> bool:
        """Its requests write keys of their own (write and watch), rather than
        reading or choosing among keys written before it."""
        return self.type in ("write", "watch")

    def as_raw(self) -> dict[str, Any]:
        """Every key that means something for this type of workload, for YAML."""
        raw = self.model_dump(mode="json")
        if raw.get("check") is None:
            raw.pop("check", None)
        return {k: v for k, v in raw.items() if k not in self.meaningless()}

    def meaningless(self) -> tuple[str, ...]:
        """The keys this type of workload does not use."""
        if self.type == "mixed":
            return WRITE_ONLY + WATCH_ONLY
        if self.type == "watch":
            return READ_ONLY + MIXED_ONLY
        dropped = WRITE_ONLY if self.type == "read" else READ_ONLY
        return dropped + MIXED_ONLY + WATCH_ONLY

    def step_plan(self) -> list[tuple[int, int, int]]:
        """(clients, connections, requests) per step; one step without client_steps.
        Requests are shared evenly, the remainder going to the last step; each
        step uses at most ``connections`` connections and never more than its clients."""
        steps = self.client_steps or (self.clients,)
        share, extra = divmod(self.requests, len(steps))
        plan = []
        for i, clients in enumerate(steps):
            requests = share + (extra if i == len(steps) - 1 else 0)
            plan.append((clients, min(self.connections, clients), requests))
        return plan


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


class DatabaseSpec(_Model):
    """One column of the results table: a database kind at a version, with settings."""

    id: str = Field(
        pattern=ID_PATTERN,
        max_length=64,
        description="Unique; names the table column and the results folder",
    )
    kind: str = Field(description="The database kind: etcd, zookeeper or consul")
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
    workload: Workload = Field(
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
        if self.hosts and "members" in self.model_fields_set and self.members != len(self.hosts):
            raise ValueError(
                f"members ({self.members}) differs from the number of hosts ({len(self.hosts)})"
            )
        return self

    @model_validator(mode="after")
    def _can_run_its_workload(self) -> Self:
        if self.workload.type == "watch" and not KINDS[self.kind].watches:
            able = ", ".join(name for name, kind in KINDS.items() if kind.watches)
            raise ValueError(
                f"kind {self.kind} cannot run type: watch yet (the load engine watches: {able})"
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
    return create_model(f"{kind.__class__.__name__}Spec", __base__=DatabaseSpec, **fields)


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
    workload: Workload = Field(description="What the load does (the workload keys)")
    databases: Annotated[tuple[AnySpec, ...], Field(strict=False, min_length=1)] = Field(
        description="One column of the table each, run in this order (the database keys)"
    )
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] | Literal["auto"] = Field(
        1,
        description="Trials per database, interleaved (A1 B1 A2 B2 ...), each on a fresh"
        " cluster; auto: until the stopping metrics are decided",
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
        " since the first began: seconds or a duration like 90m (unset: no limit)",
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
        loaded = [db.id for db in databases if db.endpoints]
        if loaded:
            raise ValueError(
                f"faults need agents on the members: {', '.join(loaded)} only names"
                " endpoints (a cluster dbtester does not run)"
            )
        check_schedule(faults, min(db.member_count for db in databases))
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


def spread_problem(workload: Workload, hosts: int) -> str | None:
    """Why ``workload`` cannot be shared among ``hosts`` load hosts (None: it can)."""
    if workload.type == "watch":
        return (
            "a watch load keeps its writers and watchers on one host (an event's delay is"
            " measured on one clock): remove load_hosts"
        )
    if workload.type == "mixed" and workload.insert_proportion > 0:
        return (
            "a mixed load's inserts number new keys on one host: with load_hosts, set"
            " insert_proportion to 0"
        )
    for number, (clients, connections, _) in enumerate(workload.step_plan()):
        if min(clients, connections) < hosts:
            what = "clients" if clients < hosts else "connections"
            step = f" in client step {number + 1}" if len(workload.step_plan()) > 1 else ""
            return (
                f"{hosts} load hosts need at least {hosts} {what}{step}, one each; there"
                f" are {min(clients, connections)}"
            )
    return None


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
    "workload": tuple(Workload.model_fields),
    "database": tuple(DatabaseSpec.model_fields),
    "host": tuple(Host.model_fields),
    "publish": tuple(Publish.model_fields),
    "faults": tuple(Fault.model_fields),
    "search": tuple(Search.model_fields),
}
