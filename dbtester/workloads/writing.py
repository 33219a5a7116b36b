"""What the types whose requests write keys of their own share (write, watch):
the keys' order, and room for them in ``key_size``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from dbtester.util.keys import KeySpace
from dbtester.workloads.base import MAX_RANDOM_ORDER, Workload, only

if TYPE_CHECKING:
    from dbtester._engine import KeysPlan, MixPlan

__all__ = ["KeyWriting"]


class KeyWriting(Workload):
    """Each request writes key ``first_key + i`` (or one key, overwritten)."""

    sequential_keys: bool = Field(
        True, description="Keys in order (true) or in a seeded random order (false)"
    )

    @property
    def writes_keys(self) -> bool:
        return not self.one_key

    @property
    def moves_keys(self) -> bool:
        return not self.one_key

    def _check_own(self) -> None:
        if not self.writes_keys:
            return
        if not self.sequential_keys and max(self.requests, self.warmup_requests) > MAX_RANDOM_ORDER:
            name = "requests" if self.requests > MAX_RANDOM_ORDER else "warmup_requests"
            raise ValueError(
                f"{name} ({max(self.requests, self.warmup_requests):,}) must be at most"
                f" {MAX_RANDOM_ORDER:,} with sequential_keys: false (the random order is"
                " held in memory, 4 bytes a key)"
            )
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

    def plan_keys(self, first_key: int, existing: int | None) -> KeysPlan:
        count, space = (1, 0) if self.one_key else (0, self.requests)
        return {
            "existing": count,
            "first": first_key,
            "choose": "same",
            "inserts": "sequential" if self.sequential_keys else "permuted",
            "insert_space": space,
            "zipfian_constant": 0.99,
            "hot_set_fraction": 0.2,
            "hot_operation_fraction": 0.8,
        }

    def plan_mix(self) -> MixPlan:
        return only("update" if self.one_key else "insert")
