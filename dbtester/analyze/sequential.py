"""Verdicts that stay valid when the data are looked at after every trial
(``repeat: auto``).

Trials run interleaved (A1 B1 A2 B2 ...), so trial k of a database and trial
k of the baseline form a pair: the host's slow drift falls on both. Each
pair gives a log ratio, log(B_k / A_k); after n pairs the mean log ratio gets
a t interval. Looking after every pair and stopping at the first interval
that excludes 0 would make false verdicts far more likely than the interval's
level says, so the looks share the error rate:

- the run's 5% is shared equally between the stopping metrics (Bonferroni:
  2.5% each for AVG-THROUGHPUT and Latency p99), per database compared with
  the first;
- a metric's share is the chance that *any* of its looks, n = 3 ..
  max_trials, wrongly excludes no change. The looks' boundaries have
  O'Brien and Fleming's shape (P. C. O'Brien and T. R. Fleming, "A multiple
  testing procedure for clinical trials", Biometrics 35(3), 1979): on the
  normal scale C * sqrt(max_trials / n), so early looks, with few trials,
  are strict and the last is close to a single test's; each is carried to
  the t distribution of its n - 1 degrees of freedom at the same tail
  probability. C is set so that the chance of any wrong verdict is the share:
  found once per (max_trials, share) by bisection over 100,000 seeded
  simulations of the looks' t statistics under no change. For independent,
  normal log ratios the t statistics' joint distribution does not depend on
  their spread, so one calibration holds for every database and metric.

A metric is decided once its interval excludes no change (a verdict:
"faster", "slower", "more", "less") or lies inside ±``equivalence`` percent
("equivalent", which is not a difference). The intervals are on the ratio, so
they read as percent changes. Pure (the calibration's simulation is seeded).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "ALPHA",
    "MIN_TRIALS",
    "Look",
    "boundaries",
    "interval_text",
    "look",
    "t_multiplier",
]

#: the chance of any false verdict, shared between the stopping metrics
ALPHA = 0.05
#: the first look: fewer pairs give no usable spread
MIN_TRIALS = 3

State = Literal["different", "equivalent", "open"]


#: simulated runs of the calibration, and its seed (the same boundary every time)
CALIBRATION_RUNS = 100_000
CALIBRATION_SEED = 20261124


@functools.lru_cache(maxsize=64)
def boundaries(max_trials: int, alpha: float) -> tuple[float, ...]:
    """Each look's t boundary, after MIN_TRIALS .. ``max_trials`` pairs, such
    that under no change the chance of any look crossing its own is ``alpha``."""
    if max_trials < MIN_TRIALS:
        raise ValueError(f"max_trials must be at least {MIN_TRIALS}, got {max_trials}")
    rng = np.random.default_rng(CALIBRATION_SEED)
    logs = rng.standard_normal((CALIBRATION_RUNS, max_trials))
    counts = np.arange(1, max_trials + 1)
    means = np.cumsum(logs, axis=1) / counts
    squares = np.cumsum(logs**2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.sqrt((squares - counts * means**2) / (counts - 1))
        stats = (np.abs(means) / (spread / np.sqrt(counts)))[:, MIN_TRIALS - 1 :]
    looks = counts[MIN_TRIALS - 1 :]
    low, high = 0.5, 20.0  # C: crossing too often .. never
    for _ in range(50):
        scale = (low + high) / 2
        bounds = _shaped(scale, looks, max_trials)
        if (stats > bounds).any(axis=1).mean() > alpha:
            low = scale
        else:
            high = scale
    return tuple(float(b) for b in _shaped(high, looks, max_trials))


def _shaped(scale: float, looks: npt.NDArray[np.int64], max_trials: int) -> npt.NDArray[np.float64]:
    """O'Brien and Fleming's boundaries, carried to each look's t distribution."""
    from scipy import stats as scipy_stats  # 1.6 s to import: only when used

    tail = scipy_stats.norm.sf(scale * np.sqrt(max_trials / looks))
    return np.asarray(scipy_stats.t.isf(tail, looks - 1), dtype=np.float64)


def t_multiplier(n: int, max_trials: int, alpha: float) -> float:
    """The t boundary of the look after ``n`` pairs (inf before MIN_TRIALS)."""
    if n < MIN_TRIALS:
        return math.inf
    return boundaries(max_trials, alpha)[min(n, max_trials) - MIN_TRIALS]


@dataclass(frozen=True)
class Look:
    """B against A after ``n`` pairs of trials."""

    n: int
    change_pct: float  # the mean ratio's change, in %
    low_pct: float  # the look's interval, in %
    high_pct: float
    state: State


def look(
    baseline: Sequence[float],
    other: Sequence[float],
    *,
    max_trials: int,
    alpha: float,
    equivalence_pct: float,
) -> Look:
    """The look after as many pairs as both have (trial k with trial k)."""
    n = min(len(baseline), len(other))
    if n == 0:
        return Look(0, math.nan, -math.inf, math.inf, "open")
    a = np.asarray(baseline[:n], dtype=float)
    b = np.asarray(other[:n], dtype=float)
    if (a <= 0).any() or (b <= 0).any():
        # A ratio needs two positive values (no throughput at all: nothing to judge).
        return Look(n, math.nan, -math.inf, math.inf, "open")
    logs = np.log(b / a)
    mean = float(logs.mean())
    spread = float(logs.std(ddof=1)) if n > 1 else math.inf
    # No spread at all (every ratio the same): the ratio is what it is.
    half = 0.0 if spread == 0 else t_multiplier(n, max_trials, alpha) * spread / math.sqrt(n)
    low, high = _pct(mean - half), _pct(mean + half)
    return Look(n, _pct(mean), low, high, _state(low, high, equivalence_pct))


def _pct(log_ratio: float) -> float:
    try:
        return 100.0 * math.expm1(log_ratio)
    except OverflowError:  # an interval as wide as a look with 2 pairs
        return math.inf


def _state(low: float, high: float, equivalence_pct: float) -> State:
    if low > 0 or high < 0:
        return "different"
    if -equivalence_pct < low and high < equivalence_pct:
        return "equivalent"
    return "open"


#: an interval bound past this many % says only "no idea yet" (early looks'
#: boundaries are wide by design): shown as a bound, not as 27 digits
SHOWN_PCT = 999.0


def interval_text(low_pct: float | None, high_pct: float | None) -> str:
    """A look's interval for people: ``[-4.4%, +4.1%]``, with bounds beyond
    ±999% shown as ``<-999%`` / ``>+999%``."""
    if low_pct is None or high_pct is None or not math.isfinite(low_pct + high_pct):
        return "[too few trials]"

    def bound(value: float) -> str:
        if value > SHOWN_PCT:
            return f">+{SHOWN_PCT:.0f}%"
        if value < -SHOWN_PCT:
            return f"<-{SHOWN_PCT:.0f}%"
        return f"{value:+.1f}%"

    return f"[{bound(low_pct)}, {bound(high_pct)}]"
