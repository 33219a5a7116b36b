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

Before it ends, the bisection probes its lowest failing rate a second time
(once per rate): one stall of a busy host fails a probe far below the
database's capacity, and a failure taken on one look would then bound the
whole search there. A rate's verdict is its latest probe's, so a failure
that passes on the second look reopens the bracket above it.

Once the bisection has ended, the highest passing rate is probed once more:
the cluster kept every earlier probe's data (and went through the
overloaded ones), so a maximum that no longer passes at the end depends on
the order of the probes, and the run says so.

A search also stops when its time budget would not fit another probe, and
says so; what it had established (the bracket) stands. It stops as well at
a failing probe that measured the client rather than the database
(:attr:`dbtester.analyze.probes.Probe.client_bound`): its maximum is then a
lower bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dbtester.analyze.probes import Probe, ProbeRule, judge
from dbtester.config.model import Workload
from dbtester.databases.base import LoadSettings
from dbtester.load.runner import LoadOptions, LoadResult, run_load
from dbtester.results import OPERATIONS, DatabaseLayout
from dbtester.util.keys import KeySpace

__all__ = ["KeysExhaustedError", "ProbeLoads", "RateSearch", "SearchOutcome", "search_rate"]

#: a search's probes by default: no progress bar
PROBE_OPTIONS = LoadOptions(progress=None)


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
    def verdicts(self) -> dict[float, bool]:
        """Each rate probed, and whether its latest probe passed."""
        return dict(self.probes)

    @property
    def passing(self) -> float | None:
        """The highest rate that passed (on its latest probe)."""
        return max((rate for rate, ok in self.verdicts.items() if ok), default=None)

    @property
    def failing(self) -> float | None:
        """The lowest rate that failed (on its latest probe)."""
        return min((rate for rate, ok in self.verdicts.items() if not ok), default=None)

    def looks(self, rate: float) -> int:
        """How many probes offered ``rate`` so far."""
        return sum(1 for offered, _ in self.probes if offered == rate)

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
            # a failure bounds the result only once seen twice
            return failing if self.looks(failing) < 2 else None
        return (passing + failing) / 2


@dataclass(frozen=True)
class SearchOutcome:
    """What a search established."""

    probes: tuple[Probe, ...]
    #: each probe's load, in the same order
    loads: tuple[LoadResult, ...]
    #: the highest offered rate that passed (None: none did)
    maximum: float | None
    #: the lowest offered rate that failed (None: none did)
    failing: float | None
    #: "precision", "nothing meets the target", "ceiling", "client-bound",
    #: "key space" or "time budget"
    stopped: str
    #: the maximum probed once more after the bisection ended (its probe is
    #: the last): whether it passed again (None: not probed again)
    confirmed: bool | None = None

    @property
    def bisected(self) -> tuple[Probe, ...]:
        """The probes the search chose its rates from (not the last one's
        second look at the maximum)."""
        return self.probes[:-1] if self.confirmed is not None else self.probes

    @property
    def chosen(self) -> int | None:
        """The index of the probe that stands for the search: the highest
        passing one, else the lowest rate tried (None: no probe ran)."""
        if not self.probes:
            return None
        bisected = self.bisected
        if self.maximum is not None:  # its latest probe in the search passed
            return max(i for i, p in enumerate(bisected) if p.offered == self.maximum and p.passed)
        return min(range(len(bisected)), key=lambda i: bisected[i].offered)


class ProbeLoads:
    """Runs the probes of one cluster's search, each into ``out.probe(n)``,
    with keys no earlier probe (nor the warm-up) wrote: a write probe's keys
    follow the last one's, a mixed probe's inserts follow every earlier
    insert. So every key a probe wrote stays, and verification counts the
    writes of all the probes together."""

    def __init__(
        self,
        kind: str,
        settings: LoadSettings,
        workload: Workload,
        out: DatabaseLayout,
        options: LoadOptions = PROBE_OPTIONS,
        into: Callable[[int], DatabaseLayout] | None = None,
        what: str = "probe",
    ) -> None:
        self.kind = kind
        self.settings = settings
        self.workload = workload
        self.out = out
        #: where load n's files go (default: ``out.probe(n)``); ``what`` names
        #: it in its label and errors (interleave: slices runs "slice"s)
        self.into = into or out.probe
        self.what = what
        #: every probe's; its label gains the probe's number, and its seed,
        #: keys and write ids are the probe's own
        self.options = options
        #: the next write probe's first key (the warm-up wrote workload.requests
        #: keys from workload.requests on: probes skip them)
        self._next_key = 0
        self._inserts = options.warm_inserts
        self._write_ids = workload.warmup_requests

    def __call__(self, number: int, rate: float | None, requests: int) -> LoadResult:
        w = self.workload
        # Only a write load's keys move: a mixed load chooses among the keys
        # there are (its inserts follow them), a read reads its one key.
        first_key = self._next_key if w.moves_keys else 0
        warm = (w.requests, w.requests + w.warmup_requests)  # the warm-up's keys
        writes = w.moves_keys and w.warmup_requests > 0
        if writes and first_key < warm[1] and first_key + requests > warm[0]:
            first_key = warm[1]
        if w.moves_keys:
            capacity = KeySpace.capacity(w.key_size)
            if first_key + requests > capacity:
                raise KeysExhaustedError(
                    f"key_size {w.key_size} holds {capacity:,} distinct keys; {self.what}"
                    f" {number} would need keys up to {first_key + requests:,}"
                )
        load = w.model_copy(update={"rate": rate, "requests": requests, "client_steps": ()})
        options = replace(
            self.options,
            label=f"{self.options.label} {self.what} {number}".strip(),
            seed=number,
            first_key=first_key,
            warm_inserts=self._inserts,
            write_id_base=self._write_ids,
        )
        result = run_load(self.kind, self.settings, load, self.into(number), options)
        self._next_key = first_key + requests
        self._inserts += int((result.records.ops == OPERATIONS.index("insert")).sum())
        self._write_ids += requests
        return result


class KeysExhaustedError(Exception):
    """The next probe needs more distinct keys than ``key_size`` holds."""


def search_rate(
    run_probe: Callable[[int, float, int], LoadResult],
    *,
    rule: ProbeRule,
    clients: int,
    hold_s: float,
    start_rate: float,
    precision: float,
    budget_s: float,
    say: Callable[[str], None] = lambda line: None,
) -> SearchOutcome:
    """Probe at the rates :class:`RateSearch` picks, each held ``hold_s``
    seconds (``run_probe(number, rate, rate * hold_s requests)``), until the
    search ends, a failing probe measured the client, or ``budget_s`` would
    not fit another probe. ``say`` gets a line per probe. A probe whose load
    stopped early (``aborted``) ends the search: the caller decides."""
    search = RateSearch(start_rate, precision)
    probes: list[Probe] = []
    loads: list[LoadResult] = []
    deadline = time.monotonic() + budget_s

    def probe_at(rate: float, which: str = "") -> Probe:
        """A probe at ``rate``; ``which`` says why in its line ("": the search's next)."""
        result = run_probe(len(probes) + 1, rate, max(1, round(rate * hold_s)))
        loads.append(result)
        probes.append(judge(result.records, rate, rule, clients, _busy(result)))
        say(_line(len(probes), probes[-1], rule, which))
        return probes[-1]

    stopped = ""
    while (rate := search.next_rate()) is not None:
        if time.monotonic() + hold_s > deadline:
            stopped = "time budget"
            break
        try:
            probe = probe_at(rate, "the lowest failing rate again" if search.looks(rate) else "")
        except KeysExhaustedError as exc:
            say(f"search stopped: {exc}")
            stopped = "key space"
            break
        search.record(rate, probe.passed)
        if loads[-1].aborted:
            stopped = "stopped early"
            break
        if probe.client_bound:  # a failing probe that measured the client
            stopped = "client-bound"
            break
    if not stopped:
        stopped = (
            "nothing meets the target"
            if search.nothing_meets
            else "ceiling"
            if search.capped
            else "precision"
        )
    confirmed = None
    rate = search.passing
    if stopped == "precision" and rate is not None and time.monotonic() + hold_s <= deadline:
        confirmed = probe_at(rate, "the highest passing rate again").passed
    return SearchOutcome(
        tuple(probes), tuple(loads), search.passing, search.failing, stopped, confirmed
    )


def _busy(result: LoadResult) -> float | None:
    """How much CPU the engine's threads wanted over a load (what they used
    and what they waited for), as a share of the time its worker threads
    have (None: not measured)."""
    took = result.ended_unix - result.started_unix
    run, wait = result.engine_cpu_seconds, result.cpu_wait_seconds
    if took <= 0 or result.workers <= 0 or run is None or wait is None:
        return None
    return (run + wait) / took / result.workers


def _line(number: int, probe: Probe, rule: ProbeRule, which: str) -> str:
    verdict = "passed" if probe.passed else "failed: " + "; ".join(probe.failures)
    if probe.client_bound:
        busy = (
            f", its threads wanted {probe.engine_busy:.0%} of their CPU time"
            if probe.engine_busy
            else ""
        )
        verdict += (
            f" (client-bound: the engine ran {probe.engine_lag_ms:,.2f} ms late{busy}:"
            " this rate tested the client, not the database)"
        )
    name = f"probe {number} ({which})" if which else f"probe {number}"
    return (
        f"{name}: offered {probe.offered:,.0f}/s, answered {probe.achieved:,.0f}/s,"
        f" p{rule.percentile:g} {probe.latency_ms:,.2f} ms: {verdict}"
    )
