"""``type: mixed``: YCSB's core workload. A load phase writes `key_count`
keys (not measured), then `requests` operations are drawn with the four
shares over a key distribution."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from dbtester.results import OPERATIONS, Records
from dbtester.util.keys import KeySpace
from dbtester.workloads.base import MAX_RANDOM_ORDER, Consistency, Seeding, Workload

if TYPE_CHECKING:
    from dbtester._engine import KeysPlan, MixPlan

__all__ = [
    "CONFLICT_ROW",
    "MIN_MIXED_VALUE_SIZE",
    "MIXED_OPERATIONS",
    "OPERATION_ROWS",
    "STALE_ROW",
    "MixedWorkload",
]

#: the operations of a mixed load, as the records name them
MIXED_OPERATIONS = OPERATIONS[:4]

#: a mixed workload's values name their key and write: 32 bytes of tag
MIN_MIXED_VALUE_SIZE = 32
#: a load of more than one operation has these rows per operation, named
#: <OPERATION>-<row> (READ-, UPDATE-, INSERT-, READ-MODIFY-WRITE-), over that
#: operation's requests
OPERATION_ROWS = ("THROUGHPUT", "Latency p50", "Latency p99", "Latency p99.9", "Latency max")
#: read-modify-writes that lost their race (an outcome, not an error)
CONFLICT_ROW = "CONFLICT-COUNT"
#: reads that found no key although it was written and acknowledged before
#: they were sent (ZooKeeper serves reads from a member that may lag): stale
STALE_ROW = "STALE-READS"


class MixedWorkload(Workload):
    """Reads, updates, inserts and read-modify-writes over `key_count` keys."""

    VALUES: ClassVar[Literal["fixed", "tagged"]] = "tagged"
    SEEDING: ClassVar[Seeding] = "load-phase"
    # its reads go to the load phase's keys or to acknowledged inserts
    STALE_IF_MISSING: ClassVar[bool] = True
    ROWS: ClassVar[tuple[str, ...]] = (
        *(f"{op.upper()}-{row}" for op in MIXED_OPERATIONS for row in OPERATION_ROWS),
        CONFLICT_ROW,
        STALE_ROW,
    )
    SUMMARY: ClassVar[str] = (
        "YCSB's reads, updates, inserts and read-modify-writes over `key_count` keys"
    )
    #: keys of other types that mean nothing here, and why
    REFUSED: ClassVar[dict[str, str]] = {
        "sequential_keys": "its keys are chosen by request_distribution",
        "same_key": "its keys are chosen by request_distribution",
    }

    type: Literal["mixed"] = Field("mixed", description="mixed: " + SUMMARY)
    consistency: Consistency = Field("linearizable", description="The reads' consistency")
    key_count: int = Field(
        1000,
        ge=1,
        le=MAX_RANDOM_ORDER,
        description="Keys the load phase writes before the measured requests",
    )
    read_proportion: float = Field(0.95, ge=0, le=1, description="The share of reads")
    update_proportion: float = Field(
        0.05, ge=0, le=1, description="The share of updates (overwrite an existing key)"
    )
    insert_proportion: float = Field(
        0.0, ge=0, le=1, description="The share of inserts (create a new key)"
    )
    read_modify_write_proportion: float = Field(
        0.0,
        ge=0,
        le=1,
        description="The share of atomic read-modify-writes (a lost race: `conflict`);"
        " the four shares add up to 1",
    )
    request_distribution: Literal["uniform", "zipfian", "latest", "hotspot"] = Field(
        "zipfian", description="How each request's key is chosen"
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

    @field_validator("value_size")
    @classmethod
    def _room_for_the_tag(cls, value: int, info: ValidationInfo) -> int:
        if value < MIN_MIXED_VALUE_SIZE:
            raise ValueError(
                f"value_size must be at least {MIN_MIXED_VALUE_SIZE} for type: mixed"
                f" (each value names its key and the write that made it), got {value}"
            )
        return value

    def _check_own(self) -> None:
        shares = self._shares()
        if abs(sum(shares.values()) - 1.0) > 1e-9:
            raise ValueError(
                "read_proportion, update_proportion, insert_proportion and"
                " read_modify_write_proportion must add up to 1, got"
                f" {' + '.join(f'{s:g}' for s in shares.values())} = {sum(shares.values()):g}"
            )
        capacity = KeySpace.capacity(self.key_size)
        inserts = math.ceil(self.insert_proportion * (self.requests + self.warmup_requests))
        needed = self.key_count + self.requests + self.warmup_requests
        if inserts and needed > capacity:
            raise ValueError(
                f"key_size {self.key_size} holds {capacity:,} distinct"
                f" keys, fewer than key_count + requests + warmup_requests ({needed:,}) that"
                " inserts may need: raise key_size"
            )
        if self.key_count > capacity:
            raise ValueError(
                f"key_size {self.key_size} holds {capacity:,} distinct"
                f" keys, fewer than key_count ({self.key_count:,}): raise key_size"
            )

    def _shares(self) -> dict[str, float]:
        """Each operation's share, under the records' names."""
        return dict(
            zip(
                MIXED_OPERATIONS,
                (
                    self.read_proportion,
                    self.update_proportion,
                    self.insert_proportion,
                    self.read_modify_write_proportion,
                ),
                strict=True,
            )
        )

    @property
    def read_consistency(self) -> Consistency:
        return self.consistency

    @property
    def readiness_key(self) -> int:
        return self.key_count - 1  # the load phase's last key: written last

    def needs(self) -> list[tuple[str, str]]:
        found = super().needs()
        if self.read_modify_write_proportion > 0:
            found.append(("read_modify_write", "read_modify_write_proportion"))
        return found

    def describe(self, requests: str) -> str:
        mix = ", ".join(f"{share:.0%} {op}" for op, share in self._shares().items() if share)
        return (
            f"load {self.key_count:,} keys, then {requests} operations ({mix};"
            f" {self.request_distribution} keys; {self.consistency} reads)"
        )

    def spread_problem(self, hosts: int) -> str | None:
        if self.insert_proportion > 0:
            return (
                "a mixed load's inserts number new keys on one host: with load_hosts, set"
                " insert_proportion to 0"
            )
        return super().spread_problem(hosts)

    def plan_keys(self, first_key: int, existing: int | None) -> KeysPlan:
        return {
            "existing": self.key_count if existing is None else existing,
            "first": first_key,
            "choose": self.request_distribution,
            "inserts": "sequential",
            "insert_space": self.requests,
            "zipfian_constant": self.zipfian_constant,
            "hot_set_fraction": self.hot_set_fraction,
            "hot_operation_fraction": self.hot_operation_fraction,
        }

    def plan_mix(self) -> MixPlan:
        return {
            "read": self.read_proportion,
            "update": self.update_proportion,
            "insert": self.insert_proportion,
            "read_modify_write": self.read_modify_write_proportion,
        }

    def existing_keys(self, warm_inserts: int) -> int | None:
        # a warm-up's inserts exist too, and its writes came first
        return self.key_count + warm_inserts

    def load_phase(self) -> Workload:
        """YCSB's "load": `key_count` inserts of keys 0, 1, ..., closed loop."""
        return self.model_copy(update={"requests": self.key_count, "client_steps": (), "rate": 0.0})

    def key_writes(self, records: Records) -> Records:
        # its updates and reads create no key; its inserts do
        return records.subset(records.ops == OPERATIONS.index("insert"))
