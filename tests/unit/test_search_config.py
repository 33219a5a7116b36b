"""The test case's `search:` (what it sets, what it refuses, at which line),
the engine-lag rule that marks a probe client-bound, and a search's rows
and chart series in the analysis."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest

from dbtester.analyze.figures import SEARCH_CURVE, SEARCH_ROWS, SEARCH_TARGET, compute, table_rows
from dbtester.analyze.probes import MIN_TREND_SECONDS, ProbeRule, engine_lag_ms, judge
from dbtester.cli import describe_search, describe_workload
from dbtester.config.load import load_test_case_text
from dbtester.config.search import MIN_HOLD_S
from dbtester.control.run import _with_repeat
from dbtester.errors import BadInputError
from dbtester.results import LoadWindow, ProbeRecord, Records, SearchRecord
from dbtester.util.progress import Reporter
from tests.support.data import START, analysis_data
from tests.support.poll import poll_until
from tests.unit.problems import problems_of

CASE = """\
title: t
workload:
  type: write
  clients: 10
  connections: 5
databases:
  - {id: a, kind: etcd, version: 3.5.17}
search:
  slo_ms: 10
"""


def test_a_search_with_its_defaults() -> None:
    case = load_test_case_text(CASE, "case.yaml").case
    assert case.search is not None
    search = case.search
    assert (search.percentile, search.hold_s, search.start_rate, search.precision) == (
        99.0,
        10.0,
        1000.0,
        0.05,
    )
    assert search.time_budget == 600.0
    # the workload's requests are the first probe's: 1,000/s for 10 s
    assert case.workload.requests == 10_000
    assert describe_search(search) == (
        "the highest rate with p99 within 10 ms, each rate held 10 s, from 1,000/s to a"
        " precision of 5%; at most 600 s per database and trial"
    )
    assert "write rate x hold_s requests" in describe_workload(case.workload, search)
    assert describe_workload(case.workload, search).endswith("at the rates the search offers")


def test_durations_and_the_resolved_case_round_trip() -> None:
    text = CASE + "  hold_s: 6s\n  time_budget: 5m\n  start_rate: 250\n"
    case = load_test_case_text(text, "case.yaml").case
    assert case.search is not None
    assert (case.search.hold_s, case.search.time_budget) == (6.0, 300.0)
    assert case.workload.requests == 1500
    raw = case.to_raw()
    # what the search sets itself is not written back, so the file loads again
    assert not {"requests", "rate", "client_steps"} & set(raw["workload"])
    import yaml

    again = load_test_case_text(yaml.safe_dump(raw), "again.yaml").case
    assert again.search == case.search and again.workload == case.workload


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ("workload", "  requests: 100\n"),
            "6:3: requests is set by the search: each probe makes rate x hold_s requests;"
            " remove it",
        ),
        (("workload", "  rate: 50\n"), "6:3: rate is what the search varies"),
        (("workload", "  client_steps: [1, 2]\n"), "6:3: client_steps cannot run during a search"),
        (("workload", "  check: {clients: 2}\n"), "6:3: check cannot run during a search"),
        (("top", "faults:\n  - {at: 1s, action: kill, member: 0}\n"), "10:1: faults cannot run"),
        (
            ("top", "repeat: auto\n"),
            "10:1: repeat: auto cannot run a search",
        ),
    ],
)
def test_what_a_search_sets_is_refused_at_its_line(extra: tuple[str, str], expected: str) -> None:
    where, text = extra
    if where == "workload":
        case = CASE.replace("  connections: 5\n", "  connections: 5\n" + text)
    else:
        case = CASE + text
    problems = problems_of(case)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_database_override_is_refused_where_it_is_written() -> None:
    case = CASE.replace(
        "  - {id: a, kind: etcd, version: 3.5.17}",
        "  - {id: a, kind: etcd, version: 3.5.17, workload: {rate: 5}}",
    )
    (problem,) = problems_of(case)
    assert problem.startswith("7:53: rate is what the search varies"), problem


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("  hold_s: 2\n", "hold_s: 2.0 is out of range: must be greater than or equal to 5"),
        ("  precision: 0\n", "precision: 0 is out of range"),
        ("  percentile: 101\n", "percentile: 101 is out of range"),
        ("  slo: 3\n", "unknown key 'slo'; did you mean 'slo_ms'?"),
    ],
)
def test_bad_search_keys(line: str, words: str) -> None:
    (problem,) = problems_of(CASE + line)
    assert words in problem, problem


def test_the_minimum_hold_fits_the_trend_test() -> None:
    assert MIN_HOLD_S == MIN_TREND_SECONDS


def test_repeat_auto_from_the_command_line_is_refused() -> None:
    case = load_test_case_text(CASE, "case.yaml").case
    with pytest.raises(BadInputError, match="--repeat auto cannot run a search"):
        _with_repeat(case, "auto", Reporter(io.StringIO()))
    assert _with_repeat(case, 3, Reporter(io.StringIO())).repeat == 3


# --------------------------------------------------------------------------- engine lag


def _records(due_ms: list[float], sent_ms: list[float], end_ms: list[float]) -> Records:
    due = (np.array(due_ms) * 1e6).astype(np.int64)
    end = (np.array(end_ms) * 1e6).astype(np.int64)
    sent = (np.array(sent_ms) * 1e6).astype(np.int64)
    n = len(due)
    return Records(
        due, end - due, end - sent, np.zeros(n, np.uint8), np.zeros(n, np.uint16), ["ok"]
    )


def test_lateness_while_a_client_was_free_is_the_engines() -> None:
    # one client; each request due every 10 ms, served in 1 ms, but sent 4 ms late
    due = [10.0 * i for i in range(100)]
    records = _records(due, [d + 4 for d in due], [d + 5 for d in due])
    assert engine_lag_ms(records, clients=1, percentile=99) == pytest.approx(4.0)
    probe = judge(records, 100.0, ProbeRule(slo_ms=2.0, percentile=99), clients=1)
    assert not probe.passed and probe.client_bound  # 4 of its 5 ms were the engine's


def test_waiting_for_a_busy_client_is_the_databases() -> None:
    # one client, a request due every 1 ms, each served in 10 ms: a queue
    # builds behind the client, which was never free when a request was due
    due = [1.0 * i for i in range(50)]
    sent = [10.0 * i for i in range(50)]
    records = _records(due, sent, [s + 10 for s in sent])
    assert engine_lag_ms(records, clients=1, percentile=99) == 0.0
    probe = judge(records, 1000.0, ProbeRule(slo_ms=5.0, percentile=99), clients=1)
    assert not probe.passed and not probe.client_bound
    # with more clients than could ever be busy, the same lateness is the engine's
    assert engine_lag_ms(records, clients=100, percentile=50) > 100


def test_a_timer_that_rounds_up_is_not_the_client() -> None:
    due = [10.0 * i for i in range(100)]
    records = _records(due, [d + 0.5 for d in due], [d + 1.5 for d in due])
    probe = judge(records, 100.0, ProbeRule(slo_ms=1.0, percentile=99), clients=1)
    assert not probe.passed and not probe.client_bound  # 0.5 ms: below CLIENT_LAG_MS


# --------------------------------------------------------------------------- analysis


def _probe(number: int, offered: float, latency_ms: float, failures: tuple[str, ...] = ()):
    window = LoadWindow(started_unix=START, ended_unix=START + 10, workers=1, cpu_seconds=1.0)
    return ProbeRecord(
        number=number,
        offered=offered,
        achieved=offered,
        latency_ms=latency_ms,
        error_rate=0.0,
        trend_tau=0.0,
        trend_p_value=1.0,
        trend_rise_ms=0.0,
        trend_median_ms=latency_ms,
        trend_seconds=10,
        engine_lag_ms=0.1,
        client_bound=False,
        failures=failures,
        load=window,
    )


def _searched(maximum: float | None, chosen: int) -> SearchRecord:
    probes = (
        _probe(1, 1000.0, 4.0, () if maximum else ("above",)),
        _probe(2, 2000.0, 12.0, ("above",)),
        _probe(3, 1500.0, 8.0, () if maximum else ("above",)),
    )
    return SearchRecord(
        slo_ms=10.0,
        percentile=99.0,
        hold_s=10.0,
        start_rate=1000.0,
        precision=0.5,
        time_budget_s=600.0,
        probes=probes,
        maximum=maximum,
        failing=2000.0,
        stopped="precision",
        chosen=chosen,
    )


def test_a_search_leads_the_table_and_draws_its_curve() -> None:
    data = analysis_data(n=1000)
    data = replace(data, record=data.record.model_copy(update={"search": _searched(1500.0, 3)}))
    figures = compute(data)
    assert figures.values["MAX-SUSTAINABLE-THROUGHPUT"] == 1500.0
    assert figures.values["LATENCY-AT-MAX-SUSTAINABLE"] == 8.0
    assert table_rows([figures])[:2] == list(SEARCH_ROWS)
    curve = figures.series[SEARCH_CURVE]
    assert curve.x.tolist() == [1000.0, 1500.0, 2000.0]  # by offered rate
    assert curve.y.tolist() == [4.0, 8.0, 12.0]
    target = figures.series[SEARCH_TARGET]
    assert target.x.tolist() == [1000.0, 2000.0] and target.y.tolist() == [10.0, 10.0]


def test_no_rate_met_is_a_result_without_a_maximum() -> None:
    data = analysis_data(n=1000)
    data = replace(data, record=data.record.model_copy(update={"search": _searched(None, 1)}))
    figures = compute(data)
    assert figures.values["MAX-SUSTAINABLE-THROUGHPUT"] is None
    assert figures.values["LATENCY-AT-MAX-SUSTAINABLE"] is None
    assert SEARCH_CURVE in figures.series


def test_a_run_without_a_search_has_no_search_rows() -> None:
    figures = compute(analysis_data(n=1000))
    assert not set(SEARCH_ROWS) & set(figures.values)
    assert SEARCH_ROWS[0] not in table_rows([figures])


def test_an_engine_that_wanted_all_its_cpu_is_client_bound() -> None:
    due = [10.0 * i for i in range(100)]
    records = _records(due, due, [d + 20 for d in due])  # 20 ms, never late
    rule = ProbeRule(slo_ms=10.0, percentile=99)
    assert not judge(records, 100.0, rule, clients=10, engine_busy=0.5).client_bound
    assert judge(records, 100.0, rule, clients=10, engine_busy=0.95).client_bound
    # a passing probe is never client-bound: it measured what it had to
    assert not judge(records, 100.0, ProbeRule(30.0, 99), clients=10, engine_busy=1.0).client_bound


def test_the_sched_meter_counts_a_threads_cpu() -> None:
    import threading
    import time

    from dbtester.util.sched import SchedMeter

    meter = SchedMeter()
    meter.sample()
    spun, release = threading.Event(), threading.Event()

    def spin() -> None:
        # 0.3 s of this thread's own CPU (process time would count the other
        # threads' too), then stay alive until the meter has sampled it
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        spun.set()
        release.wait(60)

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        poll_until(spun.is_set, timeout_s=120, message="the thread never spun 0.3 s of CPU")
        meter.sample()
    finally:
        release.set()
        worker.join()
    if not meter.available:
        pytest.skip("no scheduler statistics on this kernel")
    # The thread started after the first sample and was sampled after its
    # spin: the meter saw all of it. schedstat and the thread's CPU clock
    # account the same run time; 1% covers the clock reads around the spin.
    assert meter.run_ns >= 0.99 * 0.3e9
    assert meter.wait_seconds is not None and meter.wait_seconds >= 0


def test_a_target_missed_by_a_hair_is_not_blamed_on_the_timers() -> None:
    # 2 ms of engine lag on a 10.02 ms p99 against a 10 ms target: without it
    # the target would have been met, but the database took 8 of the 10 ms
    due = [10.0 * i for i in range(100)]
    records = _records(due, [d + 2 for d in due], [d + 10.02 for d in due])
    probe = judge(records, 100.0, ProbeRule(slo_ms=10.0, percentile=99), clients=1)
    assert not probe.passed and not probe.client_bound


def test_a_target_below_the_service_time_is_not_blamed_on_the_engine() -> None:
    # 3.4 of 6.3 ms was the engine's, but no engine would meet 0.001 ms
    due = [500.0 * i for i in range(10)]
    records = _records(due, [d + 3.4 for d in due], [d + 6.3 for d in due])
    probe = judge(records, 2.0, ProbeRule(slo_ms=0.001, percentile=99), clients=10)
    assert not probe.passed and not probe.client_bound
