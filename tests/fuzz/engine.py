"""A time budget for Hypothesis: run a property in batches until the seconds
given to the harness are spent.

Hypothesis counts examples, not seconds; each batch here is a complete
Hypothesis run (generation, then shrinking if an example fails), sized from
how long the previous examples took, so a harness stops close to its budget.
``DBTESTER_FUZZ_SECONDS`` is the budget of one harness (one test module),
shared by its fuzz functions; the default keeps ``make test`` short.

Under CI (``$CI`` set) batch k runs with Hypothesis seed k: the inputs are new
(not only the corpus) but the same on every CI run, so a red CI is always
reproducible and never a roll of the dice; ``make fuzz`` draws at random.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import given as _given
from hypothesis import seed as _seed
from hypothesis.strategies import SearchStrategy

__all__ = ["DEFAULT_SECONDS", "Stats", "budget", "fuzz"]

DEFAULT_SECONDS = 8.0
#: a Hypothesis run holds this many examples, or fewer
MAX_BATCH = 500
MIN_BATCH = 2

BASE = settings(
    deadline=None,
    database=None,
    max_examples=10,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


def budget(share: float = 1.0) -> float:
    """Seconds for one fuzz function: its share of the harness's budget."""
    seconds = float(os.environ.get("DBTESTER_FUZZ_SECONDS") or DEFAULT_SECONDS)
    return max(1.0, seconds * share)


@dataclass
class Stats:
    name: str
    examples: int = 0
    batches: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.examples / self.seconds if self.seconds else 0.0
        return (
            f"[fuzz] {self.name}: {self.examples} examples in {self.seconds:.0f} s"
            f" ({rate:.1f}/s, {self.batches} Hypothesis runs), 0 failures"
        )


def stats_mean(stats: Stats, begin: float) -> float:
    return (time.monotonic() - begin) / stats.examples if stats.examples else 0.0


def fuzz(
    name: str,
    strategy: SearchStrategy[Any],
    check: Callable[[Any], None],
    seconds: float,
) -> Stats:
    """Run ``check(example)`` on examples of ``strategy`` for about ``seconds``.
    A failing example is shrunk by Hypothesis and its exception propagates."""
    stats = Stats(name)
    begin = time.monotonic()
    end = begin + seconds
    slowest = 0.0  # the longest example so far: a batch never outlasts the budget by more
    last = 0  # the last Hypothesis run's size

    def body(example: Any) -> None:
        nonlocal slowest
        stats.examples += 1
        started = time.monotonic()
        try:
            check(example)
        finally:
            slowest = max(slowest, time.monotonic() - started)

    while (left := end - time.monotonic()) > 0:
        # Not another run when the slowest example so far would not fit: with
        # runs of MIN_BATCH (2) examples at the least, a harness then ends
        # within its budget and the cost of one example. (A first run of 10
        # examples of `dbtester analyze` once took 7 minutes of a 15-s budget.)
        if slowest and left < slowest:
            break
        # Half of what fits at the pace of the slowest example so far (the
        # first examples are Hypothesis's simplest and fastest: a pace from
        # them once made a batch run three times its budget); at least
        # MIN_BATCH, since each run starts with the simplest example.
        pace = max(stats_mean(stats, begin), slowest)
        batch = int(min(MAX_BATCH, max(MIN_BATCH, left / pace / 2))) if pace else MIN_BATCH
        # At most twice the last run's size: a pace taken from a few simple
        # examples must not size a run of hundreds of costly ones.
        batch = min(batch, 2 * last) if last else batch
        last = batch
        run = settings(BASE, max_examples=batch)(_given(strategy)(body))
        if os.environ.get("CI"):
            run = _seed(stats.batches)(run)
        run()
        stats.batches += 1
    stats.seconds = time.monotonic() - begin
    line = stats.line()
    print(line)
    log = os.environ.get("DBTESTER_FUZZ_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    return stats
