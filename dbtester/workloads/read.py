"""``type: read``: one key, seeded first, read ``requests`` times."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from dbtester.workloads.base import Consistency, Seeding, Workload, one_key, only

if TYPE_CHECKING:
    from dbtester._engine import KeysPlan, MixPlan

__all__ = ["ReadWorkload"]


class ReadWorkload(Workload):
    """Reads the one key written before the load."""

    # A write's keys in a read: harmless, and common in converted test cases.
    IGNORED: ClassVar[tuple[str, ...]] = ("sequential_keys", "same_key")
    SEEDING: ClassVar[Seeding] = "one-key"
    VERIFIED: ClassVar[bool] = False  # it writes nothing to count
    SUMMARY: ClassVar[str] = "one key, seeded first, read `requests` times"

    type: Literal["read"] = Field("read", description="read: " + SUMMARY)
    consistency: Consistency = Field("linearizable", description="The reads' consistency")

    @property
    def one_key(self) -> bool:
        return True

    @property
    def read_consistency(self) -> Consistency:
        return self.consistency

    def describe(self, requests: str) -> str:
        return f"read one key {requests} times ({self.consistency})"

    def plan_keys(self, first_key: int, existing: int | None) -> KeysPlan:
        return one_key(first_key)

    def plan_mix(self) -> MixPlan:
        return only("read")
