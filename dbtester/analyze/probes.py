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
4. **No upward trend toward the target**: the percentile of each second's
   requests (by their due time) does not rise over the hold fast enough to
   pass the target within another hold. A rate just above capacity builds
   a queue slowly, so the whole hold's percentile can still be within the
   target while latency grows without bound. Kendall's tau between the
   second and that second's percentile, one-sided, at p < 0.05, counts as a
   trend only when the Theil-Sen line through the seconds also rises by at
   least 10% of the seconds' median over the hold (a significant rise of a
   few percent is the host's drift), and fails the probe only when that
   line's last value plus one more hold's rise passes the target: a queue
   that grows gets there; a rise of a millisecond far below a 10 ms target
   (a compaction, a snapshot) is noise at a rate the database sustains.
   Fewer than 5 seconds with requests give no trend.

A failing probe is **client-bound** when the engine itself fell behind its
schedule, by either of two measures:

- its lag: each request's wait beyond the moment it could have been sent
  (it was due and a client was free: :func:`engine_lags_ns`) is the
  engine's; the probe failed its target, but the percentile of latency
  less that lag meets it, and the lag's percentile is at least 1 ms and at
  least half the latency percentile.
  Waiting for a client that was busy with an earlier request is waiting
  for the database, and counts for it;
- its CPU: the engine's own threads ran, or were ready to run and waited
  for a CPU, at least 75% of the time its worker threads have (their CPU
  and run-queue seconds over the probe's duration, per worker thread): it
  was saturated, or starved by other work on its cores. Such an engine reads replies late
  too, so its lag hides in the requests' service time and in clients kept
  busy, where the first measure cannot see it.

A failing client-bound probe measured the client, not the database: the
search stops there and its maximum is a lower bound.

Pure: numbers in, a judgement out.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dbtester.results import Records

__all__ = [
    "CLIENT_BUSY",
    "CLIENT_LAG_MS",
    "CLIENT_LAG_SHARE",
    "KEEP_UP",
    "MIN_TREND_SECONDS",
    "TREND_ALPHA",
    "TREND_RISE",
    "Probe",
    "ProbeRule",
    "Trend",
    "engine_lag_ms",
    "engine_lags_ns",
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
#: engine lag below this is the timer's resolution, never the client's limit
CLIENT_LAG_MS = 1.0
#: engine lag must be at least this share of the latency percentile to
#: count: a millisecond of timer lag on a target missed by a hair is noise
CLIENT_LAG_SHARE = 0.5
#: the share of its worker threads' time that the engine's CPU use plus its
#: wait for a CPU must reach to count as saturated or starved (an engine
#: sharing one core with five busy loops measured about 80%: its threads
#: also wait for the network)
CLIENT_BUSY = 0.75


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
    #: the Theil-Sen line's value at the last second (ms)
    end_ms: float = 0.0

    @property
    def rising(self) -> bool:
        return (
            self.seconds >= MIN_TREND_SECONDS
            and self.p_value < TREND_ALPHA
            and self.rise_ms >= TREND_RISE * self.median_ms
        )

    def breaches(self, slo_ms: float) -> bool:
        """Rising fast enough to pass ``slo_ms`` within one more hold: a
        queue that grows; a rise that would stay far below the target is the
        host's noise at a rate the database sustains."""
        return self.rising and self.end_ms + self.rise_ms > slo_ms


@dataclass(frozen=True)
class Probe:
    """One probe's figures and the reasons it failed (none: it passed)."""

    offered: float  # requests per second
    achieved: float  # answered per second over the probe
    latency_ms: float  # the rule's percentile over every request
    error_rate: float
    trend: Trend
    failures: tuple[str, ...]
    #: the engine's own lateness (:func:`engine_lag_ms`)
    engine_lag_ms: float = 0.0
    #: the CPU the engine's threads used or waited for over the probe, as a
    #: share of its worker threads' time (None: not measured)
    engine_busy: float | None = None
    #: without the engine's own lag its latency would have met the target
    lagged: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def client_bound(self) -> bool:
        """A failing probe that measured the client: without the engine's
        lag it would have met the target, or its threads were saturated."""
        if self.passed:
            return False
        return self.lagged or (self.engine_busy or 0.0) >= CLIENT_BUSY


def judge(
    records: Records,
    offered: float,
    rule: ProbeRule,
    clients: int = 1,
    engine_busy: float | None = None,
) -> Probe:
    """The verdict on a probe whose requests are ``records``, offered at
    ``offered`` requests per second by ``clients`` clients; ``engine_busy``
    is the client's CPU over it as a share of its engine threads'."""
    total = len(records)
    ok = records.code == 0
    answered = int(ok.sum())
    achieved = records.throughput()  # answered per second, as AVG-THROUGHPUT
    error_rate = (total - answered) / total if total else 1.0
    latency = _percentile_ms(records.latency_ns[ok], rule.percentile, float("inf"))
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
    if found.breaches(rule.slo_ms):
        failures.append(
            f"{label} rose {found.rise_ms:,.2f} ms over the hold"
            f" (Kendall's tau {found.tau:.2f}, p = {found.p_value:.3f}), and at that pace"
            f" would pass the {rule.slo_ms:g} ms target within another hold"
        )
    lags = engine_lags_ns(records, clients)
    lag = _percentile_ms(lags, rule.percentile, 0.0)
    # Would the target have been met without the engine's own lag?
    spared = _percentile_ms((records.latency_ns - lags)[ok], rule.percentile, float("inf"))
    lagged = (
        lag >= max(CLIENT_LAG_MS, CLIENT_LAG_SHARE * latency) and latency > rule.slo_ms >= spared
    )
    return Probe(
        offered, achieved, latency, error_rate, found, tuple(failures), lag, engine_busy, lagged
    )


def engine_lag_ms(records: Records, clients: int, percentile: float) -> float:
    """The ``percentile`` of :func:`engine_lags_ns`, in ms (0 without requests)."""
    return _percentile_ms(engine_lags_ns(records, clients), percentile, 0.0)


def _percentile_ms(values_ns: npt.NDArray[np.int64], percentile: float, empty: float) -> float:
    """The ``percentile`` of ``values_ns`` in ms; ``empty`` when there are none."""
    return float(np.percentile(values_ns, percentile)) / 1e6 if len(values_ns) else empty


def engine_lags_ns(records: Records, clients: int) -> npt.NDArray[np.int64]:
    """Each request's wait that was the engine's (ns, in the records' order).

    The engine hands requests to its ``clients`` first in, first out, each
    to the client that came free first. Replaying that order over the
    recorded times gives the moment each request could have gone: when it
    was due, or, with every client busy, when the first of them finished.
    What it waited beyond that (sent - could have gone) is the engine's own
    lag: its timers, its scheduling, a CPU it did not get. Waiting for a
    busy client is the database's, and is not counted."""
    if len(records) == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(records.due_ns, kind="stable")
    due = records.due_ns[order]
    end = due + records.latency_ns[order]
    sent = end - records.service_ns[order]
    free = [0] * max(1, clients)  # when each client is next free (a heap)
    could = np.empty(len(due), np.int64)
    for i, (due_i, end_i) in enumerate(zip(due.tolist(), end.tolist(), strict=True)):
        first_free = heapq.heappop(free)
        could[i] = max(due_i, first_free)
        heapq.heappush(free, end_i)
    lags = np.empty(len(due), np.int64)
    lags[order] = np.clip(sent - could, 0, None)
    return lags


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
    from scipy import stats as scipy_stats  # 1.6 s to import: only when used

    tau = scipy_stats.kendalltau(xs, ys, alternative="greater")
    line = scipy_stats.theilslopes(ys, xs)
    rise = float(line.slope * (xs[-1] - xs[0]))
    end = float(line.intercept + line.slope * xs[-1])
    return Trend(float(tau.statistic), float(tau.pvalue), rise, median, len(xs), end)
