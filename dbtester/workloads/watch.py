"""``type: watch``: writes of distinct keys at ``rate`` while ``watchers``
watch them, each event timed from its put's send."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from dbtester.workloads.check import Check
from dbtester.workloads.writing import KeyWriting

if TYPE_CHECKING:
    from dbtester._engine import WatchPlan
    from dbtester.workloads.base import Workload

__all__ = ["WATCH_PERCENTILES", "WatchWorkload"]

#: what the watchers saw, over every (event, watcher) pair. An event's latency
#: runs from its put's send to its arrival at the watcher, on the engine's one
#: clock. Expected: watchers x acknowledged puts; missed: acknowledged puts
#: whose event never reached a watcher (summed over them).
WATCH_PERCENTILES = (50, 90, 99, 99.9)


class WatchWorkload(KeyWriting):
    """Puts of keys of their own, open loop, watched by every watcher."""

    IGNORED: ClassVar[tuple[str, ...]] = ("consistency",)
    CHECK_MODELS: ClassVar[tuple[str, ...]] = ("watch",)
    REFUSED: ClassVar[dict[str, str]] = {
        "same_key": "each put writes a key of its own, so each event names the put it reports"
    }
    WATCHES: ClassVar[bool] = True
    ROWS: ClassVar[tuple[str, ...]] = (
        "WATCH-EVENTS-EXPECTED",
        "WATCH-EVENTS-RECEIVED",
        "WATCH-EVENTS-MISSED",
        "WATCH-EVENTS-DUPLICATED",
        "WATCH-EVENTS-OUT-OF-ORDER",
        "WATCH-EVENTS-COALESCED",
        *(f"WATCH-LATENCY p{p:g}" for p in WATCH_PERCENTILES),
        "WATCH-LATENCY-MAX",
        "WATCH-EVENTS-PER-SEC",
    )
    SEARCH_REFUSED: ClassVar[str | None] = (
        "a search cannot run type: watch yet (its watchers time the events of one"
        " rate); search a write workload"
    )
    SLICES_REFUSED: ClassVar[str | None] = (
        "its watchers watch one load from start to end; interleave trials"
    )
    SUMMARY: ClassVar[str] = (
        "writes of distinct keys at `rate` while `watchers` watch them, timing each event"
    )

    type: Literal["watch"] = Field("watch", description="watch: " + SUMMARY)
    watchers: int = Field(
        10, ge=1, le=10_000, description="Watchers, each watching every key the load writes"
    )
    watch_connections: int = Field(
        1, ge=1, le=10_000, description="Connections the watchers share (at most `watchers`)"
    )

    @classmethod
    def _wrong_check(cls, check: Check) -> str:
        return (
            "check with type: watch takes model: watch, which judges the"
            " watchers' events (checked clients' keys would be events the"
            " watchers do not expect)"
        )

    def _check_own(self) -> None:
        if self.rate <= 0:
            raise ValueError(
                "type: watch needs rate above 0: events are timed against puts sent at a"
                " steady rate (open loop)"
            )
        if self.client_steps:
            raise ValueError("client_steps cannot be used with type: watch; remove it")
        if self.watch_connections > self.watchers:
            raise ValueError(
                f"watch_connections ({self.watch_connections}) must not exceed watchers"
                f" ({self.watchers})"
            )
        super()._check_own()

    def describe(self, requests: str) -> str:
        return (
            f"write {requests} keys while {self.watchers:,} watchers over"
            f" {self.watch_connections:,} connections watch them"
        )

    def spread_problem(self, hosts: int) -> str | None:
        return (
            "a watch load keeps its writers and watchers on one host (an event's delay is"
            " measured on one clock): remove load_hosts"
        )

    def plan_watch(self) -> WatchPlan | None:
        # the watchers wait for every event up to the request timeout after the last put
        return {
            "watchers": self.watchers,
            "connections": self.watch_connections,
            "drain_s": self.request_timeout_s,
        }

    def warm_up(self) -> Workload:
        # A warm-up writes without watchers: their events would be in no figure.
        from dbtester.workloads.write import WriteWorkload

        fields = self.model_dump(exclude={"type", "watchers", "watch_connections", "check"})
        warm = {**fields, "requests": self.warmup_requests, "warmup_requests": 0}
        warm["client_steps"] = ()
        return WriteWorkload.model_validate({**warm, "type": "write"}, strict=False)
