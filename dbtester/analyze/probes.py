"""Whether one probe of a throughput search held its rate within the latency
target (the pass/fail rule of a step of ``search``).

A probe is an open-loop load held at one offered rate for ``hold_s``
seconds. It passes when all four hold:

1. **Latency**: the chosen percentile of every request's latency (from the
   moment it was due, so a queue in the client counts) is within ``slo_ms``.
2. **Keeping up**: the answered rate is at least 97% of the offered one. An
   overloaded database answers what it can, and the rest waits: the
   percentile of the requests that did finish would flatter it.
3. **Errors**: the share of failed requests is within ``max_error_rate``.
4. **No upward trend**: the percentile of each second's requests (by their
   due time) does not rise over the hold. A rate just above capacity builds
   a queue slowly, so the whole hold's percentile can still be within the
   target while latency grows without bound. Kendall's tau between the
   second and that second's percentile, one-sided, at p < 0.05, counts as a
   trend only when the Theil-Sen line through the seconds also rises by at
   least 10% of the seconds' median over the hold: a queue that grows
   rises far more, and a significant rise of a few percent is the host's
   drift, not a rate the database cannot sustain. Fewer than 5 seconds with
   requests give no trend.

Pure: numbers in, a judgement out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats

from dbtester.results import Records

__all__ = [
    "KEEP_UP",
    "MIN_TREND_SECONDS",
    "TREND_ALPHA",
    "TREND_RISE",
    "Probe",
    "ProbeRule",
    "Trend",
    "judge",
    "trend",
]

#: the least share of the offered rate a passing probe must answer
KEEP_UP = 0.97
#: the one-sided significance level of the trend test
TREND_ALPHA = 0.05
#: the least rise over the hold, as a share of the median, that is a trend
TREND_RISE = 0.10
#: seconds with requests needed before a trend is tested
MIN_TREND_SECONDS = 5


@dataclass(frozen=True)
class ProbeRule:
    """What a probe must meet (the search block's target and the workload's
    error allowance)."""

    slo_ms: float
    percentile: float  # e.g. 99
    max_error_rate: float = 0.0


@dataclass(frozen=True)
class Trend:
    """The per-second percentile's trend over a hold."""

    tau: float
    p_value: float
    #: the Theil-Sen line's rise from the first to the last second (ms)
    rise_ms: float
    median_ms: float
    seconds: int

    @property
    def rising(self) -> bool:
        return (
            self.seconds >= MIN_TREND_SECONDS
            and self.p_value < TREND_ALPHA
            and self.rise_ms >= TREND_RISE * self.median_ms
        )


@dataclass(frozen=True)
class Probe:
    """One probe's figures and the reasons it failed (none: it passed)."""

    offered: float  # requests per second
    achieved: float  # answered per second over the probe
    latency_ms: float  # the rule's percentile over every request
    error_rate: float
    trend: Trend
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


def judge(records: Records, offered: float, rule: ProbeRule) -> Probe:
    """The verdict on a probe whose requests are ``records``, offered at
    ``offered`` requests per second."""
    total = len(records)
    ok = records.code == 0
    answered = int(ok.sum())
    achieved = records.throughput()  # answered per second, as AVG-THROUGHPUT
    error_rate = (total - answered) / total if total else 1.0
    latency = (
        float(np.percentile(records.latency_ns[ok], rule.percentile)) / 1e6
        if answered
        else float("inf")
    )
    found = trend(records.due_ns[ok], records.latency_ns[ok], rule.percentile)
    failures = []
    label = f"p{rule.percentile:g}"
    if latency > rule.slo_ms:
        failures.append(f"{label} {latency:,.2f} ms is above the {rule.slo_ms:g} ms target")
    if achieved < KEEP_UP * offered:
        failures.append(
            f"answered {achieved:,.0f}/s of the {offered:,.0f}/s offered"
            f" ({achieved / offered:.0%}; at least {KEEP_UP:.0%} needed)"
        )
    if error_rate > rule.max_error_rate:
        failures.append(
            f"{error_rate:.2%} of requests failed (max_error_rate {rule.max_error_rate:g})"
        )
    if found.rising:
        failures.append(
            f"{label} rose {found.rise_ms:,.2f} ms over the hold"
            f" (Kendall's tau {found.tau:.2f}, p = {found.p_value:.3f})"
        )
    return Probe(offered, achieved, latency, error_rate, found, tuple(failures))


def trend(
    due_ns: npt.NDArray[np.int64], latency_ns: npt.NDArray[np.int64], percentile: float
) -> Trend:
    """The trend of each second's ``percentile`` latency (seconds by due time,
    from the first request's)."""
    if len(due_ns) == 0:
        return Trend(0.0, 1.0, 0.0, 0.0, 0)
    second = (due_ns - due_ns.min()) // 1_000_000_000
    order = np.argsort(second, kind="stable")
    second, latency = second[order], latency_ns[order] / 1e6
    starts = np.flatnonzero(np.r_[True, second[1:] != second[:-1]])
    xs = second[starts].astype(float)
    ys = np.array([np.percentile(part, percentile) for part in np.split(latency, starts[1:])])
    median = float(np.median(ys))
    if len(xs) < MIN_TREND_SECONDS or np.ptp(ys) == 0:
        return Trend(0.0, 1.0, 0.0, median, len(xs))
    tau = scipy_stats.kendalltau(xs, ys, alternative="greater")
    slope = scipy_stats.theilslopes(ys, xs).slope
    rise = float(slope * (xs[-1] - xs[0]))
    return Trend(float(tau.statistic), float(tau.pvalue), rise, median, len(xs))
