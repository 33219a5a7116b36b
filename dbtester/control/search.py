"""Which rate to offer next in a search for the highest sustainable
throughput: the order of the probes, without running them.

From ``start_rate`` the rate doubles while probes pass. While the first
probes fail it halves instead, down to ``floor``: a probe failing there
means no rate meets the target. Once one rate has passed and a higher one
has failed, the next probe is the middle of the two, and the search ends
when (lowest failing - highest passing) / highest passing is within
``precision``: the highest passing rate is then the maximum, known to that
precision. Every probe is offered inside the bracket, so the highest
passing rate is always below the lowest failing one.

Pure: the caller runs each probe and reports whether it passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RateSearch"]


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

    @property
    def done(self) -> bool:
        return self.next_rate() is None

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
