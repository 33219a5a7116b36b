"""The test case's ``search:``: find the highest open-loop rate a database
sustains within a latency target, instead of loading it at one rate.

``search: {slo_ms: 10, percentile: 99, hold_s: 10, start_rate: 1000,
precision: 0.05}``. Each probe offers one rate for ``hold_s`` seconds (so
it makes ``rate * hold_s`` requests, and the workload's ``requests`` and
``rate`` are the search's to choose); what passes is
:mod:`dbtester.analyze.probes`' rule, the order of rates
:mod:`dbtester.control.search`'s. The keys that would change the load while
it is measured (faults, client steps) or repeat it until decided (repeat:
auto) are refused at their own line (:func:`search_conflicts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dbtester.config.faults import parse_duration
from dbtester.workloads import TYPES

__all__ = [
    "DEFAULT_SEARCH_BUDGET_S",
    "MIN_HOLD_S",
    "SEARCH_SETS",
    "Search",
    "first_probe_requests",
    "search_conflicts",
]

#: a probe shorter than this has too few seconds for the trend test
#: (dbtester.analyze.probes.MIN_TREND_SECONDS; a test checks they agree)
MIN_HOLD_S = 5.0
#: the default time a search may take per database and trial
DEFAULT_SEARCH_BUDGET_S = 600.0
#: the longest search: a day
MAX_SEARCH_BUDGET_S = 86_400.0


class Search(BaseModel):
    """The target a rate must meet, and how closely to find the highest one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    slo_ms: float = Field(
        gt=0, le=600_000, description="The latency target: the percentile must be within it (ms)"
    )
    percentile: float = Field(
        99, gt=0, le=100, description="Which percentile of latency the target bounds (99: p99)"
    )
    hold_s: float = Field(
        10,
        ge=MIN_HOLD_S,
        le=3600,
        description="Seconds each rate is held (a duration like 10s); at least 5, for the"
        " trend test",
    )
    start_rate: float = Field(
        1000, ge=1, le=10_000_000, description="The first rate offered (requests/s)"
    )
    precision: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Stop when (lowest failing - highest passing) / highest passing is within this",
    )
    time_budget: float = Field(
        DEFAULT_SEARCH_BUDGET_S,
        gt=0,
        le=MAX_SEARCH_BUDGET_S,
        description="Per database and trial: no probe starts that would end past it;"
        " seconds or a duration like 10m",
    )

    _durations = field_validator("hold_s", "time_budget", mode="before")(parse_duration)

    def requests_at(self, rate: float) -> int:
        """The requests of a probe offered ``rate`` per second."""
        return max(1, round(rate * self.hold_s))


def search_conflicts(raw: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """What a test case with ``search`` must not also say: (where, why) for
    each key, in the raw (merged) data, so each is refused at its own line."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    if raw.get("faults"):
        found.append(
            (
                ("faults",),
                "faults cannot run during a search: each probe must measure the rate"
                " alone, or a fault's outage decides which rate passes; run the faults"
                " at the rate the search found, in a test case of their own",
            )
        )
    if raw.get("repeat") == "auto":
        found.append(
            (
                ("repeat",),
                "repeat: auto cannot run a search (its trials stop on table rows a"
                " search does not decide); give repeat a number",
            )
        )
    workloads: list[tuple[tuple[str | int, ...], Any]] = [(("workload",), raw.get("workload"))]
    base = raw.get("workload")
    workload_type = TYPES.get(str(base.get("type"))) if isinstance(base, dict) else None
    if workload_type is not None and workload_type.SEARCH_REFUSED:
        found.append((("workload", "type"), workload_type.SEARCH_REFUSED))
    databases = raw.get("databases")
    if isinstance(databases, Sequence):
        for i, entry in enumerate(databases):
            if isinstance(entry, dict):
                workloads.append((("databases", i, "workload"), entry.get("workload")))
    for where, workload in workloads:
        if not isinstance(workload, dict):
            continue
        for key, why in SEARCH_SETS.items():
            if key in workload:
                found.append(((*where, key), why))
        if "check" in workload:
            found.append(((*where, "check"), _CHECK_REFUSED))
    return found


_CHECK_REFUSED = (
    "check cannot run during a search yet: its checked clients would add to every"
    " probe's load; check at the rate the search found, in a test case of its own"
)


#: workload keys a search sets itself, and why they are refused
SEARCH_SETS = {
    "requests": "requests is set by the search: each probe makes rate x hold_s requests; remove it",
    "rate": "rate is what the search varies (from start_rate); remove it",
    "client_steps": "client_steps cannot run during a search: a probe holds one rate with"
    " the workload's clients; remove it",
}


def first_probe_requests(raw_search: Any) -> int:
    """The requests of a search's first probe (``start_rate * hold_s``): the
    workload's ``requests`` while the model is checked (each probe sets its
    own); 1 when the search block itself is invalid (its errors are reported
    where they are)."""
    try:
        search = Search.model_validate(raw_search)
    except ValidationError:
        return 1
    return search.requests_at(search.start_rate)
