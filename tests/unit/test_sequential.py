"""``repeat: auto``'s sequential method, simulated: over 10,000 seeded runs of
A/A and A/B trial series with the noise measured on these machines, looking
after every pair of trials and stopping at the first decided look gives a
false verdict in at most 5% of A/A runs and finds a 10% difference in at
least 90% of A/B runs. The figures printed here are the ones in the docs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from dbtester.analyze.sequential import (
    ALPHA,
    MIN_TRIALS,
    boundaries,
    look,
    t_multiplier,
)

RUNS = 10_000
MAX_TRIALS = 20
EQUIVALENCE = 5.0
#: the host's drift from one trial to the next (trials are 6-7 s apart; the
#: measured autocorrelation of its speed is 0.22 at 4 s and 0.04 at 10 s)
DRIFT = 0.15
#: Latency p99 varies more from trial to trial than throughput
P99_CV = 0.15
METRICS = 2  # AVG-THROUGHPUT and Latency p99 share the 5%


def _series(rng: np.random.Generator, cv: float, change: float) -> tuple[np.ndarray, np.ndarray]:
    """RUNS runs of MAX_TRIALS pairs (A_k, B_k) run in the order A1 B1 A2 B2 ...
    on a host whose speed drifts (AR(1) over trials, CV ``cv`` in all); B is
    ``change`` faster."""
    steps = rng.standard_normal((RUNS, 2 * MAX_TRIALS))
    host = np.empty_like(steps)
    host[:, 0] = steps[:, 0]
    for j in range(1, steps.shape[1]):
        host[:, j] = DRIFT * host[:, j - 1] + math.sqrt(1 - DRIFT**2) * steps[:, j]
    values = np.exp(cv * host)
    return values[:, 0::2], values[:, 1::2] * (1 + change)


def _simulate(cv: float, change: float, seed: int) -> tuple[float, float, float, float]:
    """The share of runs with a wrong verdict, the share that found B's change
    on throughput, the mean number of trials a run took, and the mean number
    after which throughput was decided."""
    rng = np.random.default_rng(seed)
    metrics = [_series(rng, cv, change), _series(rng, P99_CV, 0.0)]
    alpha = ALPHA / METRICS
    state = np.zeros((METRICS, RUNS), dtype=np.int8)  # 0 open, 1 different, 2 equivalent
    sign = np.zeros((METRICS, RUNS))
    stopped = np.full(RUNS, MAX_TRIALS)
    decided = np.full(RUNS, MAX_TRIALS)
    running = np.ones(RUNS, dtype=bool)
    for n in range(MIN_TRIALS, MAX_TRIALS + 1):
        t = t_multiplier(n, MAX_TRIALS, alpha)
        for m, (a, b) in enumerate(metrics):
            logs = np.log(b[:, :n] / a[:, :n])
            mean = logs.mean(axis=1)
            half = t * logs.std(axis=1, ddof=1) / math.sqrt(n)
            with np.errstate(over="ignore"):  # the first looks' intervals are that wide
                low, high = np.expm1(mean - half) * 100, np.expm1(mean + half) * 100
            fresh = running & (state[m] == 0)
            different = fresh & ((low > 0) | (high < 0))
            equivalent = fresh & ~different & (low > -EQUIVALENCE) & (high < EQUIVALENCE)
            state[m][different], sign[m][different] = 1, np.sign(mean[different])
            state[m][equivalent] = 2
            if m == 0:
                decided[different | equivalent] = n
        done = running & (state != 0).all(axis=0)
        stopped[done] = n
        running &= ~done
    wrong_aa = (state[1] == 1) | ((state[0] == 1) & (change == 0))
    found = (state[0] == 1) & (sign[0] > 0)
    return float(wrong_aa.mean()), float(found.mean()), float(stopped.mean()), float(decided.mean())


def test_the_test_case_and_the_method_agree_on_the_first_look() -> None:
    from dbtester.config.model import MIN_AUTO_TRIALS

    assert MIN_AUTO_TRIALS == MIN_TRIALS


def test_the_looks_share_the_error_rate() -> None:
    bounds = boundaries(MAX_TRIALS, 0.025)
    assert len(bounds) == MAX_TRIALS - MIN_TRIALS + 1
    # strict early, and at the last look between a single test's and Bonferroni's
    assert all(a > b for a, b in itertools.pairwise(bounds))
    single = scipy_stats.t.isf(0.025 / 2, MAX_TRIALS - 1)
    bonferroni = scipy_stats.t.isf(0.025 / 2 / len(bounds), MAX_TRIALS - 1)
    assert single < bounds[-1] < bonferroni
    assert boundaries(MAX_TRIALS, 0.025) == bounds  # the same every time (seeded)
    assert math.isinf(t_multiplier(2, MAX_TRIALS, 0.025))
    with pytest.raises(ValueError, match="at least 3"):
        boundaries(2, 0.025)


def test_the_vectorized_simulation_is_the_real_look() -> None:
    """The simulation below computes looks in bulk; here it agrees with
    look() on single runs, so it tests the code that decides."""
    rng = np.random.default_rng(3)
    a, b = _series(rng, 0.08, 0.1)
    for run in range(20):
        for n in (3, 7, 20):
            found = look(
                a[run, :n].tolist(),
                b[run, :n].tolist(),
                max_trials=MAX_TRIALS,
                alpha=ALPHA / METRICS,
                equivalence_pct=EQUIVALENCE,
            )
            logs = np.log(b[run, :n] / a[run, :n])
            half = t_multiplier(n, MAX_TRIALS, ALPHA / METRICS) * logs.std(ddof=1) / math.sqrt(n)
            with np.errstate(over="ignore"):
                low, high = np.expm1(logs.mean() - half), np.expm1(logs.mean() + half)
            assert found.low_pct == pytest.approx(float(low) * 100)
            assert found.high_pct == pytest.approx(float(high) * 100)


def test_a_look_names_what_it_decided() -> None:
    same = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert look(same, same, max_trials=5, alpha=0.05, equivalence_pct=5).state == "equivalent"
    faster = [v * 1.3 for v in same]
    decided = look(same, faster, max_trials=5, alpha=0.05, equivalence_pct=5)
    assert decided.state == "different" and decided.change_pct == pytest.approx(30.0)
    # two pairs are never enough, however far apart
    two = look([100.0, 101.0], [130.0, 120.0], max_trials=5, alpha=0.05, equivalence_pct=5)
    assert two.state == "open"
    assert (
        look([1.0, 0.0, 1.0], [1.0, 1.0, 1.0], max_trials=5, alpha=0.05, equivalence_pct=5).state
        == "open"
    )


@pytest.mark.parametrize(("cv", "power_bound"), [(0.08, 0.90), (0.12, None)])
def test_repeat_auto_keeps_its_error_rate_and_finds_a_10_pct_difference(
    cv: float, power_bound: float | None
) -> None:
    wrong, _, aa_trials, _ = _simulate(cv, 0.0, seed=1)
    _, found, ab_trials, ab_throughput = _simulate(cv, 0.10, seed=2)
    print(
        f"\n[repeat: auto, CV {cv:.0%}] A/A: false verdict in {wrong:.1%} of runs,"
        f" {aa_trials:.1f} trials on average; A/B (+10%): found in {found:.1%} of runs,"
        f" throughput decided after {ab_throughput:.1f} trials on average,"
        f" {ab_trials:.1f} trials in all"
    )
    assert wrong <= 0.05
    if power_bound is not None:
        assert found >= power_bound


def test_an_early_looks_interval_reads_as_a_bound() -> None:
    from dbtester.analyze.sequential import interval_text

    assert interval_text(-4.44, 4.06) == "[-4.4%, +4.1%]"
    assert interval_text(-100.0, 5.2e24) == "[-100.0%, >+999%]"
    assert interval_text(-1500.0, 12.0) == "[<-999%, +12.0%]"
    assert interval_text(None, 3.0) == interval_text(float("inf"), 1.0) == "[too few trials]"
