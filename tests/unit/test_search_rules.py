"""The throughput search's pure parts: a probe's pass/fail rule (with the
trend test on synthetic per-second series) and the order of the probes."""

from __future__ import annotations

import numpy as np
import pytest

from dbtester.analyze.probes import ProbeRule, judge, trend
from dbtester.control.search import RateSearch
from dbtester.results import Records

START_NS = 1_800_000_000 * 10**9
RULE = ProbeRule(slo_ms=10.0, percentile=99, max_error_rate=0.01)


def _probe(
    rate: float,
    seconds: float,
    latency_ms: np.ndarray | float,
    *,
    errors: int = 0,
    seed: int = 1,
) -> Records:
    """Requests due every 1/rate s for ``seconds``; latency per request
    (an array, or a level with 10% noise)."""
    count = int(rate * seconds)
    due = START_NS + (np.arange(count) * 1e9 / rate).astype(np.int64)
    if isinstance(latency_ms, float):
        rng = np.random.default_rng(seed)
        latency = rng.normal(latency_ms, 0.1 * latency_ms, count).clip(0.01)
    else:
        latency = np.asarray(latency_ms, float)
    latency_ns = (latency * 1e6).astype(np.int64)
    code = np.zeros(count, np.uint8)
    code[:errors] = 1
    step = np.zeros(count, np.uint16)
    return Records(due, latency_ns, latency_ns, code, step, ["ok", "timeout"])


def test_a_probe_within_everything_passes() -> None:
    probe = judge(_probe(500, 10, 4.0), 500, RULE)
    assert probe.passed, probe.failures
    assert probe.achieved == pytest.approx(500, rel=0.01)
    assert 4.0 < probe.latency_ms < 10.0
    assert not probe.trend.rising


def test_a_percentile_above_the_target_fails_and_says_by_how_much() -> None:
    probe = judge(_probe(500, 10, 12.0), 500, RULE)
    assert not probe.passed
    assert any("above the 10 ms target" in f for f in probe.failures)


def test_a_database_that_falls_behind_the_offered_rate_fails() -> None:
    # offered 1,000/s but answered over twice the time: the last request
    # finishes 10 s late
    records = _probe(1000, 10, 2.0)
    records.latency_ns[-1] = 10 * 10**9
    probe = judge(records, 1000, ProbeRule(slo_ms=100_000, percentile=50))
    assert probe.achieved < 0.97 * 1000
    assert any("of the 1,000/s offered" in f for f in probe.failures)


def test_errors_beyond_the_allowance_fail() -> None:
    probe = judge(_probe(500, 10, 4.0, errors=100), 500, RULE)  # 2% > 1%
    assert any("failed (max_error_rate 0.01)" in f for f in probe.failures)
    assert judge(_probe(500, 10, 4.0, errors=25), 500, RULE).passed  # 0.5%


def test_a_growing_queue_is_a_trend_even_within_the_target() -> None:
    """Latency climbing from 2 to 8 ms over the hold: the whole hold's p99
    is within 10 ms, but the rate is not sustainable."""
    count = 5000
    ramp = np.linspace(2.0, 8.0, count) + np.random.default_rng(3).normal(0, 0.2, count)
    probe = judge(_probe(500, 10, ramp), 500, RULE)
    assert probe.latency_ms < RULE.slo_ms
    assert probe.trend.rising
    assert probe.trend.p_value < 0.05
    assert probe.trend.rise_ms > 3.0
    assert any("rose" in f and "Kendall" in f for f in probe.failures)


@pytest.mark.parametrize("seed", range(20))
def test_flat_noise_is_not_a_trend(seed: int) -> None:
    flat = judge(_probe(200, 10, 4.0, seed=seed), 200, RULE)
    assert not flat.trend.rising, flat.trend


def test_a_small_significant_rise_is_drift_not_a_trend() -> None:
    """3% over the hold, steady enough to be significant: below the 10% the
    rule asks for."""
    count = 5000
    drift = np.linspace(4.0, 4.12, count)
    found = trend(
        START_NS + np.arange(count, dtype=np.int64) * 2_000_000,
        (drift * 1e6).astype(np.int64),
        99,
    )
    assert found.p_value < 0.05
    assert not found.rising


def test_too_few_seconds_give_no_trend() -> None:
    count = 400
    ramp = np.linspace(1.0, 50.0, count)
    found = trend(
        START_NS + np.arange(count, dtype=np.int64) * 10_000_000,  # 4 s
        (ramp * 1e6).astype(np.int64),
        99,
    )
    assert found.seconds == 4
    assert not found.rising


def test_a_probe_without_answers_fails_on_every_count() -> None:
    records = _probe(100, 10, 4.0, errors=1000)
    probe = judge(records, 100, RULE)
    assert probe.latency_ms == float("inf")
    assert probe.achieved == 0.0
    assert len(probe.failures) == 3


def _search(capacity: float, **options: float) -> RateSearch:
    """Run a search against a database that passes every rate up to ``capacity``."""
    search = RateSearch(**options)  # type: ignore[arg-type]
    while (rate := search.next_rate()) is not None:
        search.record(rate, rate <= capacity)
        assert len(search.probes) < 60
    return search


def test_the_search_doubles_then_bisects_to_the_precision() -> None:
    search = _search(200.0, start_rate=50.0, precision=0.05)
    rates = [rate for rate, _ in search.probes]
    assert rates[:3] == [50.0, 100.0, 200.0]
    assert rates[3] == 400.0  # the first failure
    passing, failing = search.passing, search.failing
    assert passing is not None and failing is not None
    assert passing <= 200.0 < failing
    assert (failing - passing) / passing <= 0.05
    assert passing >= 200.0 / 1.05


def test_the_lowest_failing_rate_is_probed_twice_before_it_bounds_the_result() -> None:
    search = _search(200.0, start_rate=50.0, precision=0.05)
    failing = search.failing
    assert failing is not None
    assert search.looks(failing) == 2
    assert search.probes[-2:] == [(failing, False), (failing, False)]
    # the other failures were not probed again
    assert all(search.looks(rate) == 1 for rate, ok in search.probes if rate != failing)


def test_a_stall_far_below_capacity_does_not_bound_the_search() -> None:
    """A CI run's first probe, 50/s against a server answering 160/s, failed
    on one stall: the search bisected down to 48/s and reported that."""
    search = RateSearch(start_rate=50.0, precision=0.05)
    stalled = True
    while (rate := search.next_rate()) is not None:
        search.record(rate, rate <= 160.0 and not stalled)
        stalled = False
        assert len(search.probes) < 60
    rates = [rate for rate, _ in search.probes]
    assert rates[:2] == [50.0, 25.0]  # halved after the stall
    assert (50.0, True) in search.probes  # the second look passed
    passing, failing = search.passing, search.failing
    assert passing is not None and failing is not None
    assert passing <= 160.0 < failing
    assert (failing - passing) / passing <= 0.05


def test_the_search_halves_while_the_first_probes_fail() -> None:
    search = _search(130.0, start_rate=1000.0, precision=0.05)
    assert [rate for rate, _ in search.probes][:4] == [1000.0, 500.0, 250.0, 125.0]
    assert search.passing is not None
    assert 130.0 / 1.05 <= search.passing <= 130.0


def test_no_rate_meets_the_target_is_an_answer() -> None:
    search = _search(0.0, start_rate=100.0, precision=0.05, floor=1.0)
    assert search.nothing_meets
    assert search.passing is None
    assert search.probes[-1] == (1.0, False)


def test_every_probe_is_inside_the_bracket() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        capacity = float(rng.uniform(5, 50_000))
        search = _search(capacity, start_rate=float(rng.uniform(10, 5000)), precision=0.05)
        passing, failing = search.passing, search.failing
        assert passing is not None and failing is not None
        assert passing <= capacity < failing
        assert (failing - passing) / passing <= 0.05


def test_a_ceiling_that_passes_ends_the_search() -> None:
    search = _search(1e12, start_rate=1000.0, precision=0.05, ceiling=8000.0)
    assert search.capped
    assert search.probes[-1] == (8000.0, True)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        RateSearch(start_rate=10.0, precision=0.0)
    with pytest.raises(ValueError, match="floor"):
        RateSearch(start_rate=0.5, precision=0.05)


def test_a_rise_far_below_the_target_is_not_a_failure() -> None:
    """4 to 5.5 ms over the hold, steadily: a trend, but at that pace the
    10 ms target is not reached within another hold (a snapshot or a
    compaction on a database that sustains the rate)."""
    count = 5000
    ramp = np.linspace(4.0, 5.5, count) + np.random.default_rng(5).normal(0, 0.05, count)
    probe = judge(_probe(500, 10, ramp), 500, RULE)
    assert probe.trend.rising
    assert probe.trend.end_ms == pytest.approx(5.5, abs=0.3)
    assert not probe.trend.breaches(RULE.slo_ms)
    assert probe.passed
    # the same climb toward a tighter target fails: 5.5 + 1.5 ms passes 6.5 ms
    tight = judge(_probe(500, 10, ramp), 500, ProbeRule(slo_ms=6.5, percentile=99))
    assert any("would pass the 6.5 ms target" in f for f in tight.failures)
