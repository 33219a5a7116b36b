"""``type: lock``: `lockers` contend for `locks` named locks, each through its
database's own recipe as its users' libraries run it (etcd: a key per
contender on its lease, ordered by create revision, each waiting for the
delete of the key before its own). An acquisition is timed from its due time
(or its send, closed loop) to the reply that says the lock is held; the
locker then holds it `hold_ms` and releases it before it takes its next.
Every acquisition is kept (``lock-holds.npz``) and judged: no two holders
of a lock at once on the engine's clock, each holder's fencing token above
the previous one's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from dbtester.util.durations import parse_duration
from dbtester.workloads.base import KeyValueError, Workload, one_key, only
from dbtester.workloads.check import Check

if TYPE_CHECKING:
    from dbtester._engine import KeysPlan, LockPlan, MixPlan

__all__ = ["COMPARED_ROWS", "LOCK_PREFIX", "LOCK_ROWS", "LockWorkload"]

#: where the locks live: lock n's recipe keys are under <prefix>lock-<n>/
LOCK_PREFIX = "/dbtester-locks/"
#: the rows a lock load adds (analyze.locks): acquisitions, the handover from
#: one holder's release to a waiting one's acquisition, the longest wait
#: against the mean, sessions opened, and releases that failed
LOCK_ROWS = (
    "LOCKS-ACQUIRED",
    "HANDOVER-P50-MS",
    "HANDOVER-P99-MS",
    "HANDOVER-MAX-MS",
    "WAIT-FAIRNESS",
    "LOCK-SESSIONS",
    "SESSION-TTL-SECONDS",
    "FAILED-RELEASES",
)


#: compared between databases without being named, where both sides took locks
COMPARED_ROWS = ("HANDOVER-P99-MS", "WAIT-FAIRNESS")


class LockWorkload(Workload):
    """Acquisitions of named locks by lockers with sessions of their own."""

    CHECK_MODELS: ClassVar[tuple[str, ...]] = ("lock",)
    VERIFIED: ClassVar[bool] = False
    ROWS: ClassVar[tuple[str, ...]] = LOCK_ROWS
    REFUSED: ClassVar[dict[str, str]] = {
        "sequential_keys": "its keys are the lock recipe's own",
        "same_key": "its keys are the lock recipe's own",
        "consistency": "a lock recipe reads as its library does (linearizable)",
    }
    SLICES_REFUSED: ClassVar[str | None] = "its lockers' sessions span one load; interleave trials"
    SUMMARY: ClassVar[str] = (
        "`lockers` acquire, hold for `hold_ms` and release `locks` named locks through"
        " each database's own lock recipe, every acquisition checked"
    )

    type: Literal["lock"] = Field("lock", description="lock: " + SUMMARY)
    lockers: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Lockers contending, each a client with a connection and a session"
        " (etcd: a lease) of its own",
    )
    locks: int = Field(
        1, ge=1, le=1_000_000, description="Named locks; each acquisition's is drawn evenly"
    )
    hold_ms: float = Field(
        10.0, ge=0, le=600_000, description="How long each acquisition holds its lock (ms)"
    )
    ttl: float = Field(
        10.0,
        description="The lockers' session TTL (etcd: the lease's), whole seconds: a"
        " locker that stops keeping it alive loses its locks after it",
    )

    _ttl = field_validator("ttl", mode="before")(parse_duration)

    @field_validator("ttl")
    @classmethod
    def _whole_seconds(cls, ttl: float) -> float:
        if ttl != int(ttl) or not 1 <= ttl <= 86_400:
            raise ValueError(f"ttl must be whole seconds from 1 s to 1 day, got {ttl:g} s")
        return ttl

    @model_validator(mode="before")
    @classmethod
    def _one_client_per_locker(cls, data: Any) -> Any:
        """Each locker is one client on a connection of its own: ``clients``
        and ``connections`` are ``lockers``, not the test case's to set."""
        if not isinstance(data, dict):
            return data
        for key in ("clients", "connections", "key_size", "value_size"):
            if key in data:
                raise KeyValueError(
                    key,
                    f"{key} is not used by type: lock: each of `lockers` is a client with a"
                    " connection of its own, and the recipe makes its own keys",
                )
        lockers = data.get("lockers", cls.model_fields["lockers"].default)
        return {**data, "clients": lockers, "connections": lockers}

    def as_raw(self) -> dict[str, Any]:
        raw = super().as_raw()
        for key in ("clients", "connections", "key_size", "value_size"):
            raw.pop(key, None)
        return raw

    def _check_own(self) -> None:
        if self.client_steps:
            raise ValueError("client_steps cannot be used with type: lock; set lockers")

    @property
    def judged_by(self) -> Check:
        # Every acquisition is judged whether asked or not: two holders of a
        # lock at once fail the run unless the test case says to report it.
        return self.check if self.check is not None else Check(model="lock")

    @property
    def session_ttl_s(self) -> float:
        return self.ttl

    @property
    def key_prefix(self) -> bytes:
        return LOCK_PREFIX.encode()

    def needs(self) -> list[tuple[str, str]]:
        return [*super().needs(), ("locks", "type")]

    def describe(self, requests: str) -> str:
        locks = f"{self.locks:,} lock{'s' if self.locks != 1 else ''}"
        return (
            f"{requests} acquisitions of {locks} by {self.lockers:,} lockers, each held"
            f" {self.hold_ms:g} ms (sessions of {self.ttl:g} s)"
        )

    def describe_sizes(self) -> str:
        return f"lock recipes' keys under {LOCK_PREFIX}"

    def fault_problem(self, action: str, lock: int | None) -> str | None:
        if lock is not None and lock >= self.locks:
            return f"has {self.locks:,} lock(s), 0..{self.locks - 1}: there is no lock {lock}"
        return None

    def spread_problem(self, hosts: int) -> str | None:
        return (
            "a lock load judges every acquisition on one clock, on one host: it cannot be"
            " spread over load_hosts"
        )

    def plan_keys(self, first_key: int, existing: int | None) -> KeysPlan:
        # The recipes name their keys themselves; the key-value part is unused.
        return one_key(first_key)

    def plan_mix(self) -> MixPlan:
        return only("read")

    def plan_locks(self) -> LockPlan:
        return {
            "prefix": LOCK_PREFIX,
            "count": self.locks,
            "hold_s": self.hold_ms / 1000,
            "ttl_s": int(self.ttl),
        }
