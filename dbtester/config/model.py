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

from dbtester.config.faults import (
    MAX_AT_S,
    Fault,
    check_isolation,
    check_schedule,
    parse_duration,
)
from dbtester.databases import KINDS, Options
from dbtester.errors import PublishInputError
from dbtester.publish.destination import destination_problem, parse_public_url
from dbtester.util.keys import KeySpace

__all__ = [
    "DEFAULT_FAULT_RECOVERY_S",
    "ENDPOINT_PATTERN",
    "HOST_PATTERN",
    "ID_PATTERN",
    "MIN_MIXED_VALUE_SIZE",
    "MIXED_ONLY",
    "READ_ONLY",
    "SCHEMA_KEYS",
    "VERSION_PATTERN",
    "WRITE_ONLY",
    "DatabaseSpec",
    "Host",
    "Publish",
    "TestCase",
    "Workload",
]

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# Letters, digits and . _ + ~ - only: a version reaches command lines and paths,
# so shell metacharacters and slashes are refused here already.
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}$"
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
#: repeat: auto's first look (analyze.sequential.MIN_TRIALS; a test checks they agree)
MIN_AUTO_TRIALS = 3


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Workload(_Model):
    """What the load generator does; shared by every database unless overridden."""

    type: Literal["write", "read", "mixed"]
    requests: int = Field(gt=0, le=MAX_REQUESTS)
    key_size: int = Field(256, ge=1, le=1 << 20)
    value_size: int = Field(1024, ge=0, le=64 << 20)
    sequential_keys: bool = True
    same_key: bool = False
    clients: int = Field(1000, ge=1, le=100_000)
    connections: int = Field(100, ge=1, le=100_000)
    client_steps: Annotated[tuple[Annotated[int, Field(ge=1)], ...], Field(strict=False)] = ()
    rate: float = Field(0, ge=0)  # requests/s; 0 = as fast as possible
    consistency: Literal["linearizable", "serializable"] = "linearizable"
    request_timeout_s: float = Field(10.0, gt=0, le=600)
    #: the share of requests that may fail before the run stops and fails
    max_error_rate: float = Field(0.01, ge=0, le=1)
    #: requests made before each trial's measured load and counted in no figure
    warmup_requests: int = Field(0, ge=0, le=MAX_REQUESTS)
    # mixed: YCSB's core workload. A load phase writes key_count keys (not
    # measured), then requests operations are drawn with these shares.
    key_count: int = Field(1000, ge=1, le=MAX_RANDOM_ORDER)
    read_proportion: float = Field(0.95, ge=0, le=1)
    update_proportion: float = Field(0.05, ge=0, le=1)
    insert_proportion: float = Field(0.0, ge=0, le=1)
    read_modify_write_proportion: float = Field(0.0, ge=0, le=1)
    request_distribution: Literal["uniform", "zipfian", "latest", "hotspot"] = "zipfian"
    #: zipfian and latest: key of rank r gets r^-θ / H(n, θ) of the requests
    zipfian_constant: float = Field(0.99, gt=0, le=10)
    #: hotspot: this share of the keys ...
    hot_set_fraction: float = Field(0.2, gt=0, le=1)
    #: ... gets this share of the requests
    hot_operation_fraction: float = Field(0.8, ge=0, le=1)

    @field_validator("sequential_keys", "same_key")
    @classmethod
    def _not_for_mixed(cls, value: bool, info: ValidationInfo) -> bool:
        if info.data.get("type") == "mixed":
            raise ValueError(
                f"{info.field_name} means nothing for type: mixed (its keys are chosen"
                " by request_distribution); remove it"
            )
        return value

    @field_validator(*MIXED_ONLY)
    @classmethod
    def _only_for_mixed(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is not None and kind != "mixed":
            raise ValueError(f"{info.field_name} is for type: mixed only, not {kind}; remove it")
        return value

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
        ignored = {"read": WRITE_ONLY, "write": READ_ONLY}.get(workload.type, ())
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
        random_order = self.type == "write" and not (self.same_key or self.sequential_keys)
        if random_order and max(self.requests, self.warmup_requests) > MAX_RANDOM_ORDER:
            name = "requests" if self.requests > MAX_RANDOM_ORDER else "warmup_requests"
            raise ValueError(
                f"{name} ({max(self.requests, self.warmup_requests):,}) must be at most"
                f" {MAX_RANDOM_ORDER:,} with sequential_keys: false (the random order is"
                " held in memory, 4 bytes a key)"
            )
        if self.type == "write" and not self.same_key:
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

    def as_raw(self) -> dict[str, Any]:
        """Every key that means something for this type of workload, for YAML."""
        raw = self.model_dump(mode="json")
        return {k: v for k, v in raw.items() if k not in self.meaningless()}

    def meaningless(self) -> tuple[str, ...]:
        """The keys this type of workload does not use."""
        if self.type == "mixed":
            return WRITE_ONLY
        dropped = WRITE_ONLY if self.type == "read" else READ_ONLY
        return dropped + MIXED_ONLY

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

    address: str = Field(min_length=1, pattern=HOST_PATTERN)
    agent_port: int = Field(3500, ge=1, le=65535)
    ssh_port: int = Field(22, ge=1, le=65535)
    ssh_user: str | None = Field(None, pattern=USER_PATTERN)  # None: --ssh-user, else $USER
    #: where the agent's venv, config, token and data live (relative: to the home dir)
    agent_dir: str = Field("dbtester-agent", pattern=AGENT_DIR_PATTERN)

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

    url: str = Field(min_length=1)
    #: where readers fetch the files; default: the bucket's public URL
    public_url: str | None = None

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

    id: str = Field(pattern=ID_PATTERN, max_length=64)
    kind: str
    version: str = Field(pattern=VERSION_PATTERN)
    description: str = ""
    members: int = Field(3, ge=1, le=MAX_MEMBERS)
    hosts: Annotated[tuple[Host, ...], Field(strict=False)] = ()
    endpoints: Annotated[
        tuple[Annotated[str, Field(pattern=ENDPOINT_PATTERN)], ...],
        Field(strict=False),
    ] = ()
    flags: Options = Options()
    client: Options = Options()
    #: the effective workload (the test case's, with this entry's overrides applied)
    workload: Workload

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

    title: str = Field(min_length=1)
    description: str = ""
    workload: Workload
    databases: Annotated[tuple[AnySpec, ...], Field(strict=False, min_length=1)]
    #: trials per database, interleaved (A1 B1 A2 B2 ...), each on a fresh cluster;
    #: "auto": until the stopping metrics are decided (analyze/sequential.py)
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] | Literal["auto"] = 1
    #: repeat: auto: at most this many trials per database
    max_trials: int = Field(DEFAULT_MAX_TRIALS, ge=MIN_AUTO_TRIALS, le=MAX_REPEAT)
    #: repeat: auto: no new round of trials starts once this many seconds have
    #: passed since the first began (None: no limit but max_trials)
    time_budget: float | None = Field(None, gt=0, le=MAX_AT_S)
    #: repeat: auto: a change whose interval lies inside ± this many percent
    #: is "equivalent" (decided, and not a difference)
    equivalence: float = Field(5.0, gt=0, le=100)
    #: repeat: auto: the rows that must be decided before the trials stop
    stopping_metrics: Annotated[tuple[str, ...], Field(strict=False, min_length=1)] = (
        "AVG-THROUGHPUT",
        "Latency p99",
    )
    #: applied to every database's cluster during its load (config/faults.py)
    faults: Annotated[tuple[Fault, ...], Field(strict=False, max_length=100)] = ()
    #: with faults: a load in which no request succeeds for this long stops,
    #: and the run fails (the cluster did not recover)
    fault_recovery: float = Field(DEFAULT_FAULT_RECOVERY_S, gt=0, le=MAX_AT_S)
    publish: Publish | None = None

    _recovery = field_validator("fault_recovery", mode="before")(parse_duration)
    _budget = field_validator("time_budget", mode="before")(parse_duration)

    @field_validator("max_trials", "time_budget", "equivalence", "stopping_metrics")
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

    def database(self, db_id: str) -> DatabaseSpec:
        for db in self.databases:
            if db.id == db_id:
                return db
        raise KeyError(db_id)

    def to_raw(self) -> dict[str, Any]:
        """Plain data for YAML: the workload in full (a benchmark should say what it
        does), other defaults left out, per-database workloads only where they differ."""
        raw = self.model_dump(mode="json", exclude_defaults=True)
        base = self.workload.as_raw()
        raw["workload"] = base
        for db_raw, db in zip(raw["databases"], self.databases, strict=True):
            own = db.workload.as_raw()
            override = {k: v for k, v in own.items() if base.get(k) != v}
            db_raw.pop("workload", None)
            db_raw["kind"] = db.kind
            if override:
                db_raw["workload"] = override
        return raw


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
}
