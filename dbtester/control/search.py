"""The search for the highest sustainable throughput: which rate to offer
next (:class:`RateSearch`, pure) and the probes themselves
(:func:`search_rate`, each an open-loop load judged by
:mod:`dbtester.analyze.probes`).

From ``start_rate`` the rate doubles while probes pass. While the first
probes fail it halves instead, down to ``floor``: a probe failing there
means no rate meets the target. Once one rate has passed and a higher one
has failed, the next probe is the middle of the two, and the search ends
when (lowest failing - highest passing) / highest passing is within
``precision``: the highest passing rate is then the maximum, known to that
precision. Every probe is offered inside the bracket, so the highest
passing rate is always below the lowest failing one.

A search also stops when its time budget would not fit another probe, and
says so; what it had established (the bracket) stands.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dbtester.analyze.probes import Probe, ProbeRule, judge
from dbtester.config.model import Workload
from dbtester.databases.base import LoadSettings
from dbtester.load.runner import run_load
from dbtester.results import DatabaseLayout

__all__ = ["RateSearch", "SearchOutcome", "search_rate"]


@dataclass
class RateSearch:
    start_rate: float
    precision: float
    #: the lowest rate tried before concluding that no rate meets the target
    floor: float = 1.0
    #: the highest rate tried: more than any database here answers, so a
    #: search past it is the client's limit rather than the database's
    ceiling: float = 10_000_000.0
    #: (rate, passed) of every probe so far, in order
    probes: list[tuple[float, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.start_rate <= self.ceiling:
            raise ValueError("expected 0 < floor <= start_rate <= ceiling")
        if self.precision <= 0:
            raise ValueError("precision must be above 0")

    @property
    def passing(self) -> float | None:
        """The highest rate that passed."""
        return max((rate for rate, ok in self.probes if ok), default=None)

    @property
    def failing(self) -> float | None:
        """The lowest rate that failed."""
        return min((rate for rate, ok in self.probes if not ok), default=None)

    @property
    def nothing_meets(self) -> bool:
        """The floor itself failed: no rate meets the target."""
        failing = self.failing
        return self.passing is None and failing is not None and failing <= self.floor

    @property
    def capped(self) -> bool:
        """The ceiling passed: the maximum is above what a search will offer."""
        passing = self.passing
        return passing is not None and passing >= self.ceiling

    def record(self, rate: float, passed: bool) -> None:
        self.probes.append((rate, passed))

    def next_rate(self) -> float | None:
        """The rate of the next probe, or None when the search is over."""
        if not self.probes:
            return self.start_rate
        passing, failing = self.passing, self.failing
        if failing is None:  # every probe passed: up
            assert passing is not None
            return None if self.capped else min(passing * 2, self.ceiling)
        if passing is None:  # every probe failed: down
            return None if self.nothing_meets else max(failing / 2, self.floor)
        if (failing - passing) / passing <= self.precision:
            return None
        return (passing + failing) / 2


@dataclass(frozen=True)
class SearchOutcome:
    """What a search established."""

    probes: tuple[Probe, ...]
    #: the highest offered rate that passed (None: none did)
    maximum: float | None
    #: the lowest offered rate that failed (None: none did)
    failing: float | None
    #: "precision", "nothing meets the target", "ceiling" or "time budget"
    stopped: str


def search_rate(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    out: Path,
    *,
    rule: ProbeRule,
    hold_s: float,
    start_rate: float,
    precision: float,
    budget_s: float,
    workers: int | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> SearchOutcome:
    """Probe ``workload`` at the rates :class:`RateSearch` picks, each held
    ``hold_s`` seconds (``rate * hold_s`` requests) into ``out/probe-N``,
    until the search ends or ``budget_s`` would not fit another probe.
    ``say`` gets a line per probe."""
    search = RateSearch(start_rate, precision)
    probes: list[Probe] = []
    deadline = time.monotonic() + budget_s
    stopped = ""
    while (rate := search.next_rate()) is not None:
        if time.monotonic() + hold_s > deadline:
            stopped = "time budget"
            break
        requests = max(1, round(rate * hold_s))
        probe_load = workload.model_copy(
            update={"rate": rate, "requests": requests, "client_steps": ()}
        )
        layout = DatabaseLayout(out / f"probe-{len(probes) + 1}")
        result = run_load(
            kind, settings, probe_load, layout, workers=workers, progress=None, seed=len(probes) + 1
        )
        probe = judge(result.records, rate, rule)
        probes.append(probe)
        search.record(rate, probe.passed)
        say(_line(len(probes), probe, rule))
    if not stopped:
        stopped = (
            "nothing meets the target"
            if search.nothing_meets
            else "ceiling"
            if search.capped
            else "precision"
        )
    return SearchOutcome(tuple(probes), search.passing, search.failing, stopped)


def _line(number: int, probe: Probe, rule: ProbeRule) -> str:
    verdict = "passed" if probe.passed else "failed: " + "; ".join(probe.failures)
    return (
        f"probe {number}: offered {probe.offered:,.0f}/s, answered {probe.achieved:,.0f}/s,"
        f" p{rule.percentile:g} {probe.latency_ms:,.2f} ms: {verdict}"
    )
