"""``type: kubernetes``: etcd as kube-apiserver drives it. A load phase
creates `objects` objects under ``/registry/<resource>/<namespace>/<name>``
(not measured); then `requests` requests get, list (a page at a time, every
page at the first one's revision), create, update and delete them, each
write a transaction on the object's mod_revision as the apiserver's
``storage/etcd3`` sends it. The engine keeps the table of objects it has
seen (each with the mod_revision last seen, as the apiserver's watch cache
supplies it) and holds their count between half and one and a half times
`objects`, as etcd's robustness tests do. Events (``event_proportion``)
are created under ``/registry/events/`` with a lease, as the apiserver's
lease manager attaches them, and expire with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from dbtester.results import OPERATIONS, Records, Verification
from dbtester.util.durations import parse_duration
from dbtester.workloads.base import KeyValueError, Seeding, Workload, one_key, only
from dbtester.workloads.check import Check
from dbtester.workloads.mixed import CONFLICT_ROW, OPERATION_ROWS

if TYPE_CHECKING:
    from dbtester._engine import KeysPlan, KubernetesPlan, MixPlan

__all__ = [
    "COMPACTION_ROWS",
    "COMPARED_ROWS",
    "COUNTER_ROWS",
    "EVENT_ROWS",
    "EXPIRATION_ROWS",
    "INFORMER_ROWS",
    "LIST_RATE_ROWS",
    "RESOURCE",
    "VERBS",
    "KubernetesWorkload",
    "account_objects",
]

#: the resource its objects are: the apiserver keeps pods under /registry/pods/
RESOURCE = "pods"
#: the load's counters (``LoadWindow.counters``) that are table rows, by row
COUNTER_ROWS: Mapping[str, str] = {
    "UPDATE-CONFLICTS": "update_conflicts",
    "UPDATE-RETRIES": "update_retries",
    "DELETE-CONFLICTS": "delete_conflicts",
    "DELETE-RETRIES": "delete_retries",
    "CREATE-SKIPPED": "create_skipped",
    "DELETE-SKIPPED": "delete_skipped",
    "LIST-PAGES": "list_pages",
    "LIST-RESTARTS": "list_restarts",
    "COMPACTIONS": "compactions",
}
#: the counters of a load that created events, by row: leases granted, and
#: events seen expiring during the load; and the most in one second
EVENT_ROWS: Mapping[str, str] = {
    "EVENT-LEASES": "event_leases",
    "EVENT-EXPIRATIONS": "expirations",
    "EXPIRATIONS-PER-S-MAX": "",
}
#: p99 latency (ms) of the requests in flight in a second in which events
#: expired, and of the rest (analyze.expirations)
EXPIRATION_ROWS = ("EXPIRATIONS-P99-DURING-MS", "EXPIRATIONS-P99-OUTSIDE-MS")
#: where events are kept, as the apiserver keeps them
EVENTS_PREFIX = "/registry/events/"
#: what lists delivered per second of the load: pages, objects, and MB
#: (10^6 bytes of replies), from the counters ``list_pages``,
#: ``list_objects`` and ``list_bytes``
LIST_RATE_ROWS: Mapping[str, tuple[str, float]] = {
    "LIST-PAGES-PER-S": ("list_pages", 1.0),
    "LIST-OBJECTS-PER-S": ("list_objects", 1.0),
    "LIST-MB-PER-S": ("list_bytes", 1e-6),
}
#: how long the longest compaction took (s), and the load's p99 and max
#: latency (ms) during compactions and outside them (analyze.compactions)
COMPACTION_ROWS = (
    "COMPACTION-SECONDS-MAX",
    "COMPACTION-P99-DURING-MS",
    "COMPACTION-P99-OUTSIDE-MS",
    "COMPACTION-MAX-DURING-MS",
    "COMPACTION-MAX-OUTSIDE-MS",
)
#: its informers': the slowest first list (ms), events' lag p50, p99 and
#: max (ms), events, relists and resumed watches in all, and how many
#: converged on a fresh list at the end (analyze.informers)
INFORMER_ROWS = (
    "INFORMER-SYNCED-MS",
    "INFORMER-LAG-P50-MS",
    "INFORMER-LAG-P99-MS",
    "INFORMER-LAG-MAX-MS",
    "INFORMER-EVENTS",
    "INFORMER-RELISTS",
    "INFORMER-RESUMES",
    "INFORMERS-CONVERGED",
)
#: its operations, as the records name them
VERBS = ("get", "list", "create", "update", "delete", "event")
#: compared between databases without being named (where both sides ran
#: this traffic): each verb's p99, what contention and lists cost, and what
#: compactions and informers saw
COMPARED_ROWS = (
    *(f"{verb.upper()}-Latency p99" for verb in VERBS if verb != "event"),
    "UPDATE-CONFLICTS",
    "LIST-OBJECTS-PER-S",
    "COMPACTION-P99-DURING-MS",
    "INFORMER-LAG-P99-MS",
)
#: the verbs that write an object
_WRITES = ("create", "update", "delete")


class KubernetesWorkload(Workload):
    """Kube-apiserver's storage traffic over `objects` objects."""

    SEEDING: ClassVar[Seeding] = "load-phase"
    CHECK_MODELS: ClassVar[tuple[str, ...]] = ("informer",)
    ROWS: ClassVar[tuple[str, ...]] = (
        *(f"{verb.upper()}-{row}" for verb in VERBS for row in OPERATION_ROWS),
        CONFLICT_ROW,
        *COUNTER_ROWS,
        *COMPACTION_ROWS,
        *INFORMER_ROWS,
        *EVENT_ROWS,
        *EXPIRATION_ROWS,
        *LIST_RATE_ROWS,
    )
    SEARCH_REFUSED: ClassVar[str | None] = (
        "a search's probes would each start from the objects the last one left: not yet"
    )
    SLICES_REFUSED: ClassVar[str | None] = (
        "its informers, compactor and objects span one load; interleave trials"
    )
    SUMMARY: ClassVar[str] = (
        "kube-apiserver's gets, paginated lists and optimistic creates, updates and deletes"
        " over `objects` objects"
    )
    REFUSED: ClassVar[dict[str, str]] = {
        "sequential_keys": "its objects are named as the apiserver names them",
        "same_key": "its objects are named as the apiserver names them",
    }

    type: Literal["kubernetes"] = Field("kubernetes", description="kubernetes: " + SUMMARY)
    objects: int = Field(
        1000,
        ge=2,
        le=10_000_000,
        description="Objects the load phase creates (not measured); the run holds their count"
        " between half and one and a half times this",
    )
    object_size: int = Field(
        2048,
        ge=1,
        le=1_500_000,
        description="Bytes per object (a pod is about 2-8 KB); etcd takes at most 1.5 MiB",
    )
    namespaces: int = Field(
        10, ge=1, le=100_000, description="Namespaces the objects are spread over"
    )
    page_size: int = Field(
        500,
        ge=1,
        le=100_000,
        description="Objects per page of a list (client-go's pager asks 500)",
    )
    get_proportion: float = Field(
        0.15, ge=0, le=1, description="The share of gets (a linearizable read of one object)"
    )
    list_proportion: float = Field(
        0.05,
        ge=0,
        le=1,
        description="The share of lists (every object, `page_size` at a time, each page at"
        " the first page's revision)",
    )
    create_proportion: float = Field(
        0.08, ge=0, le=1, description="The share of creates (Txn: if mod_revision is 0, put)"
    )
    update_proportion: float = Field(
        0.6,
        ge=0,
        le=1,
        description="The share of updates (Txn: if mod_revision is the one last seen, put;"
        " else get, and again with what it got)",
    )
    delete_proportion: float = Field(
        0.12,
        ge=0,
        le=1,
        description="The share of deletes (Txn: if mod_revision is the one last seen, delete;"
        " else get, and again)",
    )
    event_proportion: float = Field(
        0.0,
        ge=0,
        le=1,
        description="The share of event creates (under /registry/events/, each with a lease"
        " as the apiserver attaches one); the six shares add up to 1",
    )
    event_ttl: float = Field(
        3600.0,
        ge=1,
        le=366 * 86_400,
        description="How long an event lives (kube-apiserver's --event-ttl, 1h by default):"
        " its lease is granted for this plus lease_reuse_s; whole seconds, as etcd's leases",
    )
    lease_reuse_s: float = Field(
        60.0,
        ge=0,
        le=86_400,
        description="How long one lease is attached to new events before another is granted"
        " (kube-apiserver's --lease-reuse-duration-seconds)",
    )
    lease_max_objects: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="The most events attached to one lease (kube-apiserver's limit: 1000)",
    )

    compaction_interval: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="How often to compact as kube-apiserver does (its default: 5m): claim the"
        " compaction on compact_rev_key's version, then compact to the revision seen one"
        " interval before; 0: never",
    )

    informers: int = Field(
        0,
        ge=0,
        le=100,
        description="Informers beside the load, as kube-apiserver's watch cache and"
        " client-go's reflector: each lists the objects, then watches them from that"
        " list's revision (listing again when compacted away), keeps a copy, and must"
        " hold exactly a fresh list at the end",
    )

    _interval = field_validator("compaction_interval", "event_ttl", mode="before")(parse_duration)

    @field_validator("event_ttl")
    @classmethod
    def _whole_seconds(cls, ttl: float) -> float:
        if ttl != int(ttl):
            raise ValueError(f"etcd's leases last whole seconds: event_ttl {ttl:g} s is not one")
        return ttl

    @model_validator(mode="before")
    @classmethod
    def _sized_by_object_size(cls, data: Any) -> Any:
        """Its values are its objects: ``value_size`` is ``object_size``, and
        neither it nor ``key_size`` (objects are named as the apiserver names
        them) is the test case's to set."""
        if not isinstance(data, dict):
            return data
        for key, what in (("value_size", "object_size"), ("key_size", "the apiserver's names")):
            if key in data:
                raise KeyValueError(
                    key, f"{key} is not used by type: kubernetes: its objects are sized by {what}"
                )
        size = data.get("object_size", cls.model_fields["object_size"].default)
        return {**data, "value_size": size}

    def as_raw(self) -> dict[str, Any]:
        raw = super().as_raw()
        for key in ("key_size", "value_size"):  # not its keys (see _sized_by_object_size)
            raw.pop(key, None)
        return raw

    def _check_own(self) -> None:
        shares = self._shares()
        if abs(sum(shares.values()) - 1.0) > 1e-9:
            raise ValueError(
                "get_proportion, list_proportion, create_proportion, update_proportion,"
                " delete_proportion and event_proportion must add up to 1, got"
                f" {' + '.join(f'{s:g}' for s in shares.values())} = {sum(shares.values()):g}"
            )
        if self.check is not None and not self.informers:
            raise ValueError(
                "check's model: informer judges the informers, and there are none: set"
                " informers: N (1 or more)"
            )

    @property
    def judged_by(self) -> Check | None:
        # Informers are checked whether asked or not: a copy that is not the
        # objects is a broken informer, and that fails the run unless the test
        # case says to report it.
        if self.check is None and self.informers:
            return Check(model="informer")
        return self.check

    def _shares(self) -> dict[str, float]:
        return {
            "get": self.get_proportion,
            "list": self.list_proportion,
            "create": self.create_proportion,
            "update": self.update_proportion,
            "delete": self.delete_proportion,
            "event": self.event_proportion,
        }

    @property
    def readiness_key(self) -> int:
        return self.objects - 1  # the load phase's last object: created last

    @property
    def key_prefix(self) -> bytes:
        return f"/registry/{RESOURCE}/".encode()

    def needs(self) -> list[tuple[str, str]]:
        return [*super().needs(), ("kubernetes", "type")]

    def describe(self, requests: str) -> str:
        mix = ", ".join(f"{share:.0%} {verb}" for verb, share in self._shares().items() if share)
        every = (
            f"; compaction every {self.compaction_interval:g} s"
            if self.compaction_interval
            else "; no compaction"
        )
        extra = ""
        if self.informers:
            extra += f"; {self.informers} informer{'s' if self.informers != 1 else ''}"
        if self.event_proportion:
            extra += (
                f"; events live {self.event_ttl:g} s, a lease per {self.lease_reuse_s:g} s"
                f" or {self.lease_max_objects:,} events"
            )
        return (
            f"create {self.objects:,} objects in {self.namespaces:,} namespaces, then"
            f" {requests} requests ({mix}; lists of {self.page_size:,} a page{every}"
            f"{extra})"
        )

    def describe_sizes(self) -> str:
        return f"objects of {self.object_size:,} B under {self.key_prefix.decode()}"

    def spread_problem(self, hosts: int) -> str | None:
        return (
            "Kubernetes' traffic keeps one table of the objects it has seen, on one host:"
            " it cannot be spread over load_hosts"
        )

    def plan_keys(self, first_key: int, existing: int | None) -> KeysPlan:
        # The engine names its objects itself; the key-value part is unused.
        return one_key(first_key)

    def plan_mix(self) -> MixPlan:
        return only("read")

    def plan_kubernetes(self) -> KubernetesPlan:
        shares = self._shares()
        return {
            "phase": "run",
            "prefix": self.key_prefix.decode(),
            "count": self.objects,
            "namespaces": self.namespaces,
            "page_size": self.page_size,
            "first": 0,
            "mix": {
                "get": shares["get"],
                "list": shares["list"],
                "create": shares["create"],
                "update": shares["update"],
                "delete": shares["delete"],
                "event": shares["event"],
            },
            "compaction_interval_s": self.compaction_interval,
            "informers": self.informers,
            "events_prefix": EVENTS_PREFIX,
            "event_ttl_s": int(self.event_ttl),
            "lease_reuse_s": self.lease_reuse_s,
            "lease_max_objects": self.lease_max_objects,
        }

    def load_phase(self) -> Workload:
        """The objects, created in order, closed loop."""
        return self.model_copy(update={"requests": self.objects, "client_steps": (), "rate": 0.0})

    def key_writes(self, records: Records) -> Records:
        codes = [OPERATIONS.index(verb) for verb in _WRITES]
        return records.subset(np.isin(records.ops, codes))

    def account_keys(
        self, counts: Mapping[str, int], found: int, counters: Mapping[str, int]
    ) -> Verification:
        return account_objects(counts, found, counters)


def account_objects(
    counts: Mapping[str, int], found: int, counters: Mapping[str, int]
) -> Verification:
    """``found`` objects against the engine's table at the end of the load:
    the objects it saw created and not deleted, give or take those whose
    last write's outcome is unknown (``objects_low`` .. ``objects_high``);
    and object by object, where the engine listed them after the load
    (``objects_lost``: known to exist and missing; ``objects_unexpected``:
    there and known to be gone, or never made), so that a lost object and
    an unexpected one cannot cancel out in the count."""
    attempted = sum(counts.values())
    acknowledged = counts.get("ok", 0) + counts.get("conflict", 0)
    low, high = counters.get("objects_low", 0), counters.get("objects_high", 0)
    lost, unexpected = max(0, low - found), max(0, found - high)
    return Verification(
        attempted=attempted,
        acknowledged=acknowledged,
        failed=0,
        unknown=attempted - acknowledged,
        expected_min=low,
        expected_max=high,
        found=found,
        lost=max(lost, counters.get("objects_lost", 0)),
        unexpected=max(unexpected, counters.get("objects_unexpected", 0)),
    )
