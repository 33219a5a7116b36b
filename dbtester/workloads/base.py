"""What every workload type shares: the keys, the checks on them, and the
questions the rest of dbtester asks a workload instead of its type's name.

A type is a subclass in a module of its own (``write``, ``read``, ``mixed``,
``watch``) with a ``Literal`` ``type`` tag; :mod:`dbtester.workloads` makes
the tagged union of them. Code outside a type's module never compares the
``type`` string: it asks the workload (``writes_keys``, ``plan_keys``,
``describe`` ...), so a new type is one module, not edits in eight files.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dbtester.results import Verification, account
from dbtester.util.keys import PREFIX
from dbtester.workloads.check import Check

if TYPE_CHECKING:
    from dbtester._engine import KeysPlan, KubernetesPlan, LockPlan, MixPlan, WatchPlan
    from dbtester.results import Records

__all__ = [
    "MAX_RANDOM_ORDER",
    "MAX_REQUESTS",
    "Consistency",
    "KeyValueError",
    "Seeding",
    "Workload",
    "one_key",
    "only",
]

#: a run's requests: their records take 27 bytes each in the controller's memory
MAX_REQUESTS = 1_000_000_000
#: distinct keys in random order (the engine's bound: 4 bytes of memory each)
MAX_RANDOM_ORDER = 1 << 28

Consistency = Literal["linearizable", "serializable"]
#: what a load needs written before it: nothing, its one key, or a load phase
Seeding = Literal["nothing", "one-key", "load-phase"]


def one_key(number: int) -> KeysPlan:
    """The plan's keys of a load that uses key ``number`` alone."""
    return {
        "existing": 1,
        "first": number,
        "choose": "same",
        "inserts": "sequential",
        "insert_space": 0,
        "zipfian_constant": 0.99,
        "hot_set_fraction": 0.2,
        "hot_operation_fraction": 0.8,
    }


def only(operation: str) -> MixPlan:
    """A mix of one operation (the plan's spelling: read, update, insert,
    read_modify_write)."""
    mix: MixPlan = {"read": 0.0, "update": 0.0, "insert": 0.0, "read_modify_write": 0.0}
    mix[operation] = 1.0  # type: ignore[literal-required]
    return mix


class Workload(BaseModel):
    """What the load generator does; shared by every database unless overridden.

    The keys here are every type's; each type adds its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    #: keys of other types that this one accepts, warns of and leaves out (a
    #: read's ``same_key``: harmless, and common in converted test cases)
    IGNORED: ClassVar[tuple[str, ...]] = ()
    #: keys of other types that mean nothing here, and why (refused at their line)
    REFUSED: ClassVar[dict[str, str]] = {}
    #: the ``check:`` models it can be judged by
    CHECK_MODELS: ClassVar[tuple[str, ...]] = ("linearizability",)
    #: needs a database kind whose engine can watch
    WATCHES: ClassVar[bool] = False
    #: ``tagged`` values name their key and the write that made them
    VALUES: ClassVar[Literal["fixed", "tagged"]] = "fixed"
    #: written before the load: nothing, the one key it reads, or a load phase
    SEEDING: ClassVar[Seeding] = "nothing"
    #: its keys are counted after the load against the acknowledged writes
    VERIFIED: ClassVar[bool] = True
    #: a read that finds no key was stale: the type reads only keys written
    #: and acknowledged before the read, and deletes none
    STALE_IF_MISSING: ClassVar[bool] = False
    #: why a search cannot run this type (None: it can)
    SEARCH_REFUSED: ClassVar[str | None] = None
    #: why ``interleave: slices`` cannot run this type (None: it can)
    SLICES_REFUSED: ClassVar[str | None] = None
    #: the rows it adds to the table (analyze computes them from its data)
    ROWS: ClassVar[tuple[str, ...]] = ()
    #: one line on what the type is, for the key reference and `type`'s help
    SUMMARY: ClassVar[str] = ""

    type: str = Field(
        description="The workload type: write, read, mixed, watch, kubernetes or lock; each"
        " type's own keys are listed under it"
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
    prefill_keys: int = Field(
        0,
        ge=0,
        le=MAX_REQUESTS,
        description="Keys written before the load, apart from its keys and in no figure or"
        " verification: data for a compaction, defragmentation or snapshot to work on",
    )
    prefill_value_size: int = Field(
        1024, ge=0, le=1 << 20, description="Bytes per pre-filled value"
    )
    check: Check | None = Field(
        None,
        description="checked clients beside the load, their history checked for"
        " linearizability: {model: linearizability, clients: 8, keys: 8, on_violation: fail};"
        " with type: watch, {model: watch} judges the watchers' events; with type:"
        " kubernetes, {model: informer} its informers",
    )

    @model_validator(mode="before")
    @classmethod
    def _leave_out_ignored(cls, data: Any) -> Any:
        """Keys that mean nothing for this type but are harmless (the loader
        warns of each at its line) are checked as their own type checks them,
        then left out: the workload is then what runs, and what `convert` and
        the results' config.yaml write back."""
        if not isinstance(data, dict) or not cls.IGNORED:
            return data
        for key in cls.IGNORED:
            if key in data:
                _check_as_its_owner_does(key, data[key])
        return {k: v for k, v in data.items() if k not in cls.IGNORED}

    @field_validator("check")
    @classmethod
    def _check_fits_the_type(cls, check: Check | None, info: ValidationInfo) -> Check | None:
        if check is not None and check.model not in cls.CHECK_MODELS:
            raise ValueError(cls._wrong_check(check))
        return check

    @classmethod
    def _wrong_check(cls, check: Check) -> str:
        return _wrong_check(check, cls.type_name(), cls.CHECK_MODELS)

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
        self._check_own()
        if self.client_steps and self.client_steps[-1] > self.clients:
            raise ValueError(
                f"the largest client step ({self.client_steps[-1]}) exceeds clients"
                f" ({self.clients})"
            )
        return self

    def _check_own(self) -> None:
        """The type's own checks across its keys (ValueError on a problem)."""

    @property
    def judged_by(self) -> Check | None:
        """The check the measured load is judged by: ``check:``, or one the
        type holds its load to without being asked (None: none)."""
        return self.check

    # --------------------------------------------------------------- the type

    @classmethod
    def type_name(cls) -> str:
        """The ``type:`` tag this class stands for."""
        return str(cls.model_fields["type"].default)

    @property
    def writes_keys(self) -> bool:
        """Its requests write keys of their own, not ones written before it."""
        return False

    @property
    def one_key(self) -> bool:
        """Every request goes to one key (an overwrite or a read of it)."""
        return False

    @property
    def moves_keys(self) -> bool:
        """Each new load of it (a probe, a warm-up) writes keys after the last one's."""
        return False

    @property
    def session_ttl_s(self) -> float | None:
        """The TTL its clients' sessions ask for (None: it opens none)."""
        return None

    @property
    def read_consistency(self) -> Consistency:
        """The consistency its reads ask for (types without reads: linearizable)."""
        return "linearizable"

    @property
    def key_prefix(self) -> bytes:  # what every key it writes starts with, for counting
        return PREFIX

    @property
    def readiness_key(self) -> int:
        """The key whose read says every endpoint serves what was seeded (written last)."""
        return 0

    def needs(self) -> list[tuple[str, str]]:
        """What it asks of a kind beyond plain writes and linearizable reads:
        (capability, key), as ``DatabaseKind.cannot`` names them."""
        return [("serializable", "consistency")] if self.read_consistency == "serializable" else []

    def describe(self, requests: str) -> str:
        """What the requests do, for ``validate``: ``requests`` is how many."""
        raise NotImplementedError

    def describe_sizes(self) -> str:
        """Its keys' and values' sizes, for ``validate``."""
        return f"key {self.key_size:,} B, value {self.value_size:,} B"

    def fault_problem(self, action: str, lock: int | None) -> str | None:
        """Why its engine cannot apply the client fault ``action`` (None: it can)."""
        return f"has no sessions for {action} to expire (type: lock has)"

    def spread_problem(self, hosts: int) -> str | None:
        """Why this load cannot be shared among ``hosts`` load hosts (None: it can)."""
        return _too_few_to_spread(self.step_plan(), hosts)

    # ------------------------------------------------- the engine's plan parts

    def plan_keys(self, first_key: int, existing: int | None) -> KeysPlan:
        """The plan's ``keys``: which exist, how each request's is chosen, how
        inserts are numbered. ``first_key`` moves a write load's keys;
        ``existing`` is how many a mixed load finds (None: its load phase's)."""
        raise NotImplementedError

    def plan_mix(self) -> MixPlan:
        """The plan's ``mix``: each operation's share."""
        raise NotImplementedError

    def plan_watch(self) -> WatchPlan | None:
        """The plan's ``watch``: its watchers (None: none)."""
        return None

    def plan_kubernetes(self) -> KubernetesPlan | None:
        """The plan's ``objects``: Kubernetes' objects instead of keys (None: none)."""
        return None

    def plan_locks(self) -> LockPlan | None:
        """The plan's ``locks`` instead of keys (None: a load of keys or objects)."""
        return None

    def existing_keys(self, warm_inserts: int) -> int | None:
        """How many keys a measured load finds before it (None: the default of
        its plan), given the keys a warm-up inserted."""
        return None

    def warm_up(self) -> Workload:
        """The workload a warm-up runs: ``warmup_requests`` of the same, in one
        step, without checked clients (they would be in no figure)."""
        return self.model_copy(
            update={"requests": self.warmup_requests, "client_steps": (), "check": None}
        )

    def warm_up_first_key(self) -> int:
        """Where a warm-up's keys start: after the measured load's for types
        that write keys of their own, so neither overwrites the other."""
        return self.requests if self.writes_keys else 0

    def load_phase(self) -> Workload | None:
        """What a load phase writes before the load (None: there is none)."""
        return None

    def key_writes(self, records: Records) -> Records:
        """The requests of a measured load or warm-up that may create keys,
        for counting them against the keys found."""
        return records

    def account_keys(
        self, counts: Mapping[str, int], found: int, counters: Mapping[str, int]
    ) -> Verification:
        """``found`` keys against the key writes' outcomes (``counts``) and the
        measured load's ``counters``."""
        return account(counts, found, same_key=self.one_key)

    # --------------------------------------------------------------- written

    def as_raw(self) -> dict[str, Any]:
        """Every key of this type, for YAML (no ``check`` when there is none)."""
        raw = self.model_dump(mode="json")
        if raw.get("check") is None:
            raw.pop("check", None)
        return raw

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


class KeyValueError(ValueError):
    """A problem with one key of the mapping being validated: the loader
    points at ``key``'s line rather than at the mapping's."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _too_few_to_spread(plan: list[tuple[int, int, int]], hosts: int) -> str | None:
    """Why steps of (clients, connections, requests) cannot be shared among
    ``hosts`` load hosts, each needing a client and a connection of its own."""
    for number, (clients, connections, _) in enumerate(plan):
        if min(clients, connections) < hosts:
            what = "clients" if clients < hosts else "connections"
            step = f" in client step {number + 1}" if len(plan) > 1 else ""
            return (
                f"{hosts} load hosts need at least {hosts} {what}{step}, one each; there"
                f" are {min(clients, connections)}"
            )
    return None


def _wrong_check(check: Check, type_name: str, models: tuple[str, ...]) -> str:
    if not models:
        return f"type: {type_name} takes no check: yet"
    return (
        f"check's model: {check.model} does not judge type: {type_name}:"
        f" use model: {' or '.join(models)}"
    )


def _check_as_its_owner_does(key: str, value: Any) -> None:
    """ValueError naming ``key`` when ``value`` is not one the type that has
    the key accepts."""
    for owner in _types(Workload):
        field = owner.model_fields.get(key)
        if field is None or key in Workload.model_fields:
            continue
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(Annotated[field.annotation, field])  # type: ignore[arg-type]
            adapter.validate_python(value, strict=True)
        except ValidationError as exc:
            error = exc.errors()[0]
            if error["type"] == "literal_error":
                allowed = str(error.get("ctx", {}).get("expected", "")).replace(" or ", ", ")
                reason = f"{value!r} is not allowed; allowed: {allowed}"
            else:
                reason = f"{value!r}: {error['msg']}"
            raise KeyValueError(key, f"{key}: {reason}") from None
        return


def _types(cls: type[Workload]) -> list[type[Workload]]:
    """Every subclass of ``cls``, nearest first."""
    found = list(cls.__subclasses__())
    for sub in cls.__subclasses__():
        found += _types(sub)
    return found
