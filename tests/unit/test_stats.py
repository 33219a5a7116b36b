"""The trial statistics against values computed by hand (t quantiles from
tables: t(0.975, 4) = 2.776445, t(0.975, 8) = 2.306004)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dbtester.analyze.stats import METRICS, compare, estimate

A = [10.0, 12.0, 14.0, 16.0, 18.0]  # mean 14, sd sqrt(10)
B = [20.0, 22.0, 24.0, 26.0, 28.0]  # mean 24, sd sqrt(10)


def test_estimate_of_five_trials() -> None:
    e = estimate(A)
    assert e.n == 5 and e.mean == 14.0
    assert e.sd == pytest.approx(math.sqrt(10))
    # 2.776445 * sqrt(10) / sqrt(5) = 2.776445 * sqrt(2)
    assert e.half_width == pytest.approx(3.926486, rel=1e-6)
    assert e.relative_half_width == pytest.approx(3.926486 / 14, rel=1e-6)
    assert e.cv == pytest.approx(math.sqrt(10) / 14)


def test_one_trial_has_no_interval() -> None:
    e = estimate([2645.0])
    assert (e.n, e.mean, e.half_width, e.relative_half_width, e.cv) == (1, 2645.0, None, None, None)
    with pytest.raises(ValueError):
        estimate([])


def test_welch_against_a_hand_computation() -> None:
    # difference 10, standard error sqrt(10/5 + 10/5) = 2, t = 5, df = 8
    change = compare(METRICS["AVG-THROUGHPUT"], A, B)
    assert change.change_pct == pytest.approx(100 * 10 / 14)
    assert change.p_value == pytest.approx(0.0010528, rel=1e-3)
    # 10 -/+ 2.306004 * 2, as % of 14
    assert change.low_pct == pytest.approx(100 * (10 - 4.612008) / 14, rel=1e-6)
    assert change.high_pct == pytest.approx(100 * (10 + 4.612008) / 14, rel=1e-6)
    assert change.significant and change.verdict == "faster" and not change.worse
    # the same difference judged at a level below its p-value: no verdict
    strict = compare(METRICS["Latency p99"], A, B, alpha=0.001)
    assert (strict.significant, strict.verdict, strict.worse) == (False, "~", False)
    assert compare(METRICS["Latency p99"], A, B, alpha=0.002).worse


@pytest.mark.parametrize(
    ("row", "verdict", "worse"),
    [
        ("AVG-THROUGHPUT", "slower", True),  # throughput went down
        ("Latency p99", "faster", False),  # latency went down
        ("SERVER-MAX-CPU-USAGE", "less", False),
        ("SERVER-MAX-MEMORY-USAGE", "less", False),
    ],
)
def test_the_verdict_follows_the_metric(row: str, verdict: str, worse: bool) -> None:
    change = compare(METRICS[row], B, A)  # B as baseline: A is lower
    assert (change.verdict, change.worse) == (verdict, worse)


def test_up_for_latency_and_resources_is_worse() -> None:
    assert compare(METRICS["Latency p50"], A, B).verdict == "slower"
    assert compare(METRICS["Latency p50"], A, B).worse
    assert compare(METRICS["SERVER-MAX-CPU-USAGE"], A, B).verdict == "more"
    assert compare(METRICS["SERVER-MAX-CPU-USAGE"], A, B).worse


def test_overlapping_trials_are_no_difference() -> None:
    change = compare(METRICS["AVG-THROUGHPUT"], A, [11.0, 13.0, 15.0, 17.0, 19.0])
    assert change.p_value is not None and change.p_value > 0.5
    assert change.low_pct is not None and change.high_pct is not None
    assert change.low_pct < 0 < change.high_pct
    assert change.verdict == "~" and not change.worse


def test_one_trial_cannot_be_judged() -> None:
    change = compare(METRICS["AVG-THROUGHPUT"], [100.0], [150.0])
    assert change.change_pct == pytest.approx(50.0)
    assert (change.p_value, change.verdict, change.worse) == (None, "?", False)


def test_values_that_never_vary() -> None:
    same = compare(METRICS["CLIENT-ERROR-COUNT"], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert same.verdict == "~"
    more = compare(METRICS["CLIENT-ERROR-COUNT"], [1.0, 1.0], [3.0, 3.0])
    assert (more.verdict, more.worse, more.change_pct) == ("more", True, 200.0)


def test_a_trend_across_trials_is_per_minute_with_its_interval() -> None:
    from dbtester.analyze.stats import trend

    starts = [0.0, 60.0, 120.0, 180.0, 240.0]
    falling = [1000 * 0.98**k for k in range(5)]  # 2% less each minute
    found = trend(falling, starts)
    assert found is not None and found.pct_per_min == pytest.approx(-2.0)
    assert found.clear and found.high < 0
    noisy = [1000.0, 1100.0, 950.0, 1050.0, 1000.0]
    flat = trend(noisy, starts)
    assert flat is not None and not flat.clear and flat.low < 0 < flat.high
    assert trend(falling[:3], starts[:3]) is None  # too few trials for a line
    assert trend(falling, [5.0] * 5) is None  # no spread of times


def test_paired_rounds_cancel_what_the_host_shared() -> None:
    """Each round's host speed moves both databases alike: Welch's test sees
    the spread between rounds, the paired test only what differs within one."""
    host = np.array([1.00, 0.82, 1.10, 0.91, 1.05, 0.87])
    a = list(10_000 * host)
    b = list(9_500 * host * np.array([1.002, 0.998, 1.001, 0.999, 1.0, 1.003]))
    welch = compare(METRICS["AVG-THROUGHPUT"], a, b)
    paired = compare(METRICS["AVG-THROUGHPUT"], a, b, paired=True)
    assert welch.verdict == "~" and not welch.paired
    assert paired.verdict == "slower" and paired.paired
    assert paired.p_value is not None and paired.p_value < 1e-4
    assert paired.low_pct is not None and paired.high_pct is not None
    assert paired.low_pct < paired.change_pct < paired.high_pct < 0
    # the change is still B's mean against A's, whichever test judged it
    assert paired.change_pct == pytest.approx(welch.change_pct)


def test_a_paired_comparison_needs_equal_rounds() -> None:
    with pytest.raises(ValueError, match="per round"):
        compare(METRICS["AVG-THROUGHPUT"], [1.0, 2.0, 3.0], [1.0, 2.0], paired=True)


def test_the_same_difference_every_round_is_significant() -> None:
    change = compare(
        METRICS["AVG-THROUGHPUT"], [100.0, 90.0, 110.0], [95.0, 85.0, 105.0], paired=True
    )
    assert change.p_value == 0.0 and change.verdict == "slower"
