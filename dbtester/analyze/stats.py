"""Statistics over repeated trials: how sure a figure is, and whether two
databases differ.

The sample is one value per trial: the figure a trial's table row shows (its
throughput, its p99, its server's peak CPU). Trials are independent runs on
fresh clusters, so their values are what varies from run to run.

* **An estimate** of a row is the mean of its trial values with the 95%
  confidence interval of that mean from Student's t distribution
  (n - 1 degrees of freedom), shown as a half-width relative to the mean
  (``2,645 ±3.1%``), and the coefficient of variation (sample standard
  deviation / mean).
* **A comparison** of a database B against a baseline A is Welch's t-test on
  the two sets of trial values (unequal variances): the change of B's mean
  against A's in %, the 95% confidence interval of the difference of means as a
  share of A's mean, and the two-sided p-value. Significant means p < 0.05;
  then the verdict says which way (``faster``/``slower`` for throughput and
  latency, ``more``/``less`` for resources); otherwise it is ``~``.
* **Slices** (``interleave: slices``) are not independent trials: trial k of
  every database ran in round k, each a few seconds from the others, on the
  same host in the same state. Their comparison is a paired t-test over the
  rounds (each round's difference B - A is one observation), so what the
  host did during a round cancels out instead of widening the interval.

Pure: numbers in, numbers out (scipy computes the t quantiles and the test).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dbtester.results.requests import OPERATIONS
from dbtester.workloads.kubernetes import (
    COMPACTION_ROWS,
    COMPARED_ROWS,
    COUNTER_ROWS,
    EVENT_ROWS,
    EXPIRATION_ROWS,
    INFORMER_ROWS,
    LIST_RATE_ROWS,
)
from dbtester.workloads.lock import COMPARED_ROWS as LOCK_COMPARED
from dbtester.workloads.lock import LOCK_ROWS

__all__ = [
    "ALPHA",
    "COMPARED_BY_DEFAULT",
    "CONFIDENCE",
    "DEFAULT_METRICS",
    "KUBERNETES_METRICS",
    "LOCK_METRICS",
    "METRICS",
    "SEARCH_METRICS",
    "WATCH_METRICS",
    "Change",
    "Estimate",
    "Metric",
    "Trend",
    "compare",
    "estimate",
    "trend",
]

CONFIDENCE = 0.95
ALPHA = 0.05


@dataclass(frozen=True)
class Metric:
    """A table row that can be compared: which way is better, and the words
    for a significant change up or down."""

    row: str
    better: Literal["higher", "lower"]
    up: str  # the verdict when B's mean is significantly above A's
    down: str

    def worse(self, change_pct: float) -> bool:
        return change_pct < 0 if self.better == "higher" else change_pct > 0


def _speed(row: str, better: Literal["higher", "lower"]) -> Metric:
    # Higher throughput is faster; higher latency is slower.
    return Metric(
        row, better, *(("faster", "slower") if better == "higher" else ("slower", "faster"))
    )


def _resource(row: str) -> Metric:
    return Metric(row, "lower", "more", "less")


#: every row that can be compared, by name
METRICS: Mapping[str, Metric] = {
    m.row: m
    for m in (
        _speed("AVG-THROUGHPUT", "higher"),
        _speed("MAX-SUSTAINABLE-THROUGHPUT", "higher"),
        _speed("LATENCY-AT-MAX-SUSTAINABLE", "lower"),
        _speed("MAX-THROUGHPUT", "higher"),
        _speed("MIN-THROUGHPUT", "higher"),
        _speed("TOTAL-SECONDS", "lower"),
        _speed("FASTEST-LATENCY", "lower"),
        _speed("AVG-LATENCY", "lower"),
        _speed("SLOWEST-LATENCY", "lower"),
        *(
            _speed(f"Latency p{p}", "lower")
            for p in ("10", "25", "50", "75", "90", "95", "99", "99.9", "99.99")
        ),
        _resource("SERVER-MAX-CPU-USAGE"),
        _resource("SERVER-MAX-MEMORY-USAGE"),
        _resource("SERVER-TOTAL-NETWORK-RX-DATA-SUM"),
        _resource("SERVER-TOTAL-NETWORK-TX-DATA-SUM"),
        _resource("SERVER-AVG-DISK-SPACE-USAGE"),
        # etcd's dbSize, dbSizeInUse (analyze.figures.DB_SIZE_ROWS)
        _resource("SERVER-MAX-DB-SIZE"),
        _resource("SERVER-MAX-DB-SIZE-IN-USE"),
        _resource("SERVER-AVG-WRITES-COMPLETED-DELTA-SUM"),
        _resource("SERVER-AVG-SECTORS-WRITTEN-DELTA-SUM"),
        _resource("CLIENT-MAX-CPU-USAGE"),
        _resource("CLIENT-MAX-MEMORY-USAGE"),
        _resource("CLIENT-ERROR-COUNT"),
        _resource("CLIENT-CPU-SECONDS-PER-10K-REQUESTS"),
        # mixed workloads: each operation's rows (analyze.figures.OPERATION_ROWS)
        *(
            metric
            for op in OPERATIONS
            for metric in (
                _speed(f"{op.upper()}-THROUGHPUT", "higher"),
                *(
                    _speed(f"{op.upper()}-Latency {p}", "lower")
                    for p in ("p50", "p99", "p99.9", "max")
                ),
            )
        ),
        _resource("CONFLICT-COUNT"),
        _resource("STALE-READS"),  # ZooKeeper (analyze.figures.STALE_ROW)
        # type: kubernetes (workloads.kubernetes.COUNTER_ROWS, LIST_RATE_ROWS)
        *(_resource(row) for row in COUNTER_ROWS),
        *(_resource(row) for row in EVENT_ROWS),
        *(_speed(row, "lower") for row in EXPIRATION_ROWS),
        *(_speed(row, "lower") for row in COMPACTION_ROWS),
        # informers: their lags and first list as latency, what they did as resources
        *(
            _speed(row, "lower") if row.endswith("-MS") else _resource(row)
            for row in INFORMER_ROWS
            if row != "INFORMERS-CONVERGED"  # a verdict, not a number
        ),
        *(_speed(row, "higher") for row in LIST_RATE_ROWS),
        # type: lock (workloads.lock.LOCK_ROWS): handovers as latency, the rest as resources
        *(
            _speed(row, "lower") if row.startswith("HANDOVER-") else _resource(row)
            for row in LOCK_ROWS
            if row != "LOCKS-ACQUIRED"
        ),
        _speed("LOCKS-ACQUIRED", "higher"),
        # type: watch (analyze.figures.WATCH_ROWS)
        *(_speed(f"WATCH-LATENCY p{p}", "lower") for p in ("50", "90", "99", "99.9")),
        _speed("WATCH-LATENCY-MAX", "lower"),
        _resource("WATCH-EVENTS-MISSED"),
        _resource("WATCH-EVENTS-DUPLICATED"),
        _resource("WATCH-EVENTS-OUT-OF-ORDER"),
    )
}

#: a search's rows: compared before DEFAULT_METRICS wherever both sides
#: searched (other runs have no values for them)
SEARCH_METRICS = ("MAX-SUSTAINABLE-THROUGHPUT", "LATENCY-AT-MAX-SUSTAINABLE")

#: a watch load's rows: compared after a search's wherever both sides
#: watched
WATCH_METRICS = ("WATCH-LATENCY p50", "WATCH-LATENCY p99", "WATCH-EVENTS-MISSED")

#: Kubernetes traffic's rows (workloads.kubernetes.COMPARED_ROWS): compared
#: after a watch load's wherever both sides ran it
KUBERNETES_METRICS = COMPARED_ROWS

#: a lock load's rows (workloads.lock.COMPARED_ROWS), wherever both took locks
LOCK_METRICS = LOCK_COMPARED

#: what a comparison shows unless told otherwise
DEFAULT_METRICS = (
    "AVG-THROUGHPUT",
    "Latency p50",
    "Latency p99",
    "SERVER-MAX-CPU-USAGE",
    "SERVER-MAX-MEMORY-USAGE",
)

#: compared, checked and gated when no metric is named, in this order, each
#: where both sides have values
COMPARED_BY_DEFAULT = (
    SEARCH_METRICS + WATCH_METRICS + KUBERNETES_METRICS + LOCK_METRICS + DEFAULT_METRICS
)


@dataclass(frozen=True)
class Estimate:
    """A row's value over n trials."""

    n: int
    mean: float
    sd: float  # sample standard deviation (n - 1); 0 for one trial
    half_width: float | None  # of the 95% interval of the mean; None for one trial

    @property
    def relative_half_width(self) -> float | None:
        """The half-width as a share of the mean (0.031 for ±3.1%)."""
        if self.half_width is None or self.mean == 0:
            return None
        return self.half_width / abs(self.mean)

    @property
    def cv(self) -> float | None:
        """Coefficient of variation: sd / mean; None for one trial."""
        if self.n < 2 or self.mean == 0:
            return None
        return self.sd / abs(self.mean)


def estimate(values: Sequence[float]) -> Estimate:
    """The mean of ``values`` (one per trial) and its 95% interval."""
    if not values:
        raise ValueError("no values to estimate from")
    data = np.asarray(values, dtype=float)
    n = len(data)
    mean = float(data.mean())
    if n < 2:
        return Estimate(n, mean, 0.0, None)
    sd = float(data.std(ddof=1))
    from scipy import stats as scipy_stats  # 1.6 s to import: only when used

    t = float(scipy_stats.t.ppf((1 + CONFIDENCE) / 2, n - 1))
    return Estimate(n, mean, sd, t * sd / math.sqrt(n))


@dataclass(frozen=True)
class Trend:
    """How a row moved across trials: its change per minute, in % (from a
    least-squares line through the log values against each trial's start),
    and that slope's 95% interval."""

    pct_per_min: float
    low: float
    high: float

    @property
    def clear(self) -> bool:
        """Its interval excludes no change."""
        return self.low > 0 or self.high < 0


#: the fewest trials a trend is drawn through (two points always fit a line)
MIN_TREND_TRIALS = 4


def trend(values: Sequence[float], starts_s: Sequence[float]) -> Trend | None:
    """The trend of ``values`` (one per trial, each positive) over their
    trials' start times (seconds); None with too few trials or no spread of
    times."""
    x = np.asarray(starts_s, dtype=float) / 60.0
    y = np.asarray(values, dtype=float)
    if len(y) < MIN_TREND_TRIALS or len(x) != len(y) or (y <= 0).any() or np.ptp(x) == 0:
        return None
    from scipy import stats as scipy_stats  # 1.6 s to import: only when used

    fit = scipy_stats.linregress(x, np.log(y))
    t = float(scipy_stats.t.ppf((1 + CONFIDENCE) / 2, len(y) - 2))
    slope, spread = float(fit.slope), float(fit.stderr)

    def pct(log_slope: float) -> float:
        return 100.0 * math.expm1(log_slope)

    return Trend(pct(slope), pct(slope - t * spread), pct(slope + t * spread))


@dataclass(frozen=True)
class Change:
    """B against the baseline A on one metric."""

    metric: Metric
    baseline: Estimate
    other: Estimate
    change_pct: float  # (B - A) / A, in %
    low_pct: float | None  # the 95% interval of B - A, as % of A's mean
    high_pct: float | None
    p_value: float | None  # None when either side has fewer than 2 trials
    #: the significance level: a gate over many rows may ask for a stricter one
    alpha: float = ALPHA
    #: a paired t-test over rounds (slices); else Welch's over trials
    paired: bool = False

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < self.alpha

    @property
    def verdict(self) -> str:
        """faster/slower/more/less when significant, ``~`` when not, ``?``
        when it cannot be judged (fewer than 2 trials on a side)."""
        if self.p_value is None:
            return "?"
        if not self.significant:
            return "~"
        return self.metric.up if self.change_pct > 0 else self.metric.down

    @property
    def worse(self) -> bool:
        """Significantly worse (in the metric's bad direction)."""
        return self.significant and self.metric.worse(self.change_pct)


def compare(
    metric: Metric,
    baseline: Sequence[float],
    other: Sequence[float],
    alpha: float = ALPHA,
    *,
    paired: bool = False,
) -> Change:
    """Welch's t-test of ``other``'s trials against ``baseline``'s on
    ``metric``, significant where p < ``alpha``; with ``paired``, a paired
    t-test of ``other[k] - baseline[k]`` (both as long: round k's slices)."""
    if paired and len(baseline) != len(other):
        raise ValueError("a paired comparison needs one value of each side per round")
    a, b = estimate(baseline), estimate(other)
    scale = 100.0 / abs(a.mean) if a.mean else math.nan
    change = (b.mean - a.mean) * scale if a.mean else math.nan
    if a.n < 2 or b.n < 2:
        return Change(metric, a, b, change, None, None, None, alpha, paired)
    spread = float(np.std(np.subtract(other, baseline))) if paired else max(a.sd, b.sd)
    if spread == 0:
        # No spread at all (a count that never varies, or the same difference
        # every round): any difference is real.
        p = 1.0 if a.mean == b.mean else 0.0
        diff = (b.mean - a.mean) * scale
        return Change(metric, a, b, change, diff, diff, p, alpha, paired)
    with warnings.catch_warnings():
        # scipy warns of precision loss when values are nearly identical
        warnings.simplefilter("ignore", RuntimeWarning)
        from scipy import stats as scipy_stats  # 1.6 s to import: only when used

        result = (
            scipy_stats.ttest_rel(other, baseline)
            if paired
            else scipy_stats.ttest_ind(other, baseline, equal_var=False)
        )
        interval = result.confidence_interval(CONFIDENCE)
    return Change(
        metric,
        a,
        b,
        change,
        float(interval.low) * scale,
        float(interval.high) * scale,
        float(result.pvalue),
        alpha,
        paired,
    )
