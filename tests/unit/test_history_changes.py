"""``dbtester history --changes``: where a metric's series of runs shifted
(dbtester.history.changes), on series made here and on 20 runs on disk
read back by the real command: the planted shift is named at its run, a
single noisy run is not, a change of machines cuts the series, and
``--check --changes`` gates on a shift for the worse in the newest runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from dbtester.errors import EXIT_RUN_FAILED
from dbtester.history.changes import MIN_RUNS, find_changes, noise
from dbtester.history.query import History, RunFigures
from dbtester.results import Machines
from dbtester.schemas import load_schema
from tests.conftest import ROOT
from tests.support.data import derived_runs

DAY = 86400.0
V1 = ROOT / "tests" / "fixtures" / "results-v1"
THROUGHPUT = "AVG-THROUGHPUT"


def _history(values: list[float], database: str = "db") -> History:
    runs = tuple(
        RunFigures(f"run-{i}", 1.8e9 + i * DAY, database, "etcd", "3.6.8", {THROUGHPUT: (v,)})
        for i, v in enumerate(values)
    )
    return History("here", runs, 0, {f"run-{i}": f"nightly/run-{i}" for i in range(len(values))})


def _noisy(n: int, seed: int, sd_pct: float = 1.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(rng.normal(10_000.0, 100.0 * sd_pct, n))


def test_a_planted_shift_is_named_at_its_run() -> None:
    values = _noisy(20, seed=4)
    for i in range(12, 20):
        values[i] *= 0.9  # 10% slower from run 12 on: 10 sigma of the 1% noise
    (point,) = find_changes(_history(values), [THROUGHPUT]).points
    assert point.run.run_id == "run-12" and point.root == "nightly/run-12"
    assert [r.run_id for r in point.before] == [f"run-{i}" for i in range(12)]
    assert len(point.after) == 8
    c = point.change
    assert c.change_pct == pytest.approx(-10.0, abs=1.5)
    assert c.low_pct is not None and c.high_pct is not None
    assert c.low_pct < c.change_pct < c.high_pct < 0
    assert c.verdict == "slower" and point.regression(5.0) and not point.regression(15.0)
    assert "from run run-12" in point.line() and "in nightly/run-12" in point.line()


def test_a_single_noisy_run_is_not_named() -> None:
    for seed in range(5):
        values = _noisy(20, seed=seed)
        values[7] *= 0.85  # one run 15 sigma low
        assert find_changes(_history(values), [THROUGHPUT]).points == (), seed


def test_noise_alone_names_nothing_and_short_series_are_not_searched() -> None:
    for seed in range(5):
        assert find_changes(_history(_noisy(20, seed=seed)), [THROUGHPUT]).points == ()
    # too few runs for a segment of MIN_RUNS on each side
    short = [*_noisy(2 * MIN_RUNS - 1, seed=1), 1.0]
    assert find_changes(_history(short), [THROUGHPUT]).points == ()


def test_noise_is_measured_between_neighbours_so_a_shift_does_not_inflate_it() -> None:
    values = np.array(_noisy(40, seed=2))
    steady = noise(values)
    values[20:] += 3_000.0  # a shift of 30 sigma
    assert noise(values) == pytest.approx(steady, rel=0.2)
    assert 60.0 < steady < 150.0  # the 100 it was drawn with
    assert noise(np.full(10, 5.0)) > 0  # a count that never varies


def test_a_change_of_machines_cuts_the_series() -> None:
    """The runner moved to a slower machine at run 10: a new series, not a
    change point; a real shift inside the second series is still found."""
    values = _noisy(24, seed=6)
    for i in range(10, 24):
        values[i] *= 0.7
    for i in range(17, 24):
        values[i] *= 0.9
    history = _history(values)
    amd = Machines.model_validate({"servers": [{"cpu_model": "AMD EPYC 7B13", "cores": 8}]})
    intel = Machines.model_validate({"servers": [{"cpu_model": "Intel Xeon 8375C", "cores": 8}]})

    def machines(run: RunFigures) -> Machines:
        return amd if int(run.run_id.split("-")[1]) < 10 else intel

    changes = find_changes(history, [THROUGHPUT], machines)
    assert [p.run.run_id for p in changes.points] == ["run-17"]
    assert len(changes.cuts) == 1 and changes.cuts[0].startswith("db from run-10:")
    # without the machines, the move itself is named too
    assert next(p.run.run_id for p in find_changes(history, [THROUGHPUT]).points) == "run-10"


def test_recent_shifts_are_the_gates() -> None:
    values = _noisy(20, seed=8)
    for i in range(15, 20):
        values[i] *= 0.85
    history = _history(values)
    changes = find_changes(history, [THROUGHPUT])
    # (this series' noise also has a significant step at run 7, as about one
    # history in 25 does: benchmarks/change_points.py; it is not recent)
    shift = next(p for p in changes.points if p.run.run_id == "run-15")
    assert changes.regressions(history, 5, 5.0) == [shift]
    assert changes.regressions(history, 4, 5.0) == []  # started before the newest 4
    assert changes.regressions(history, 5, 20.0) == []  # smaller than the threshold


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The version-1 fixture re-analyzed once: now with its Parquet files."""
    from dbtester.render import render

    run = Path(shutil.copytree(V1, tmp_path_factory.mktemp("v1") / "analyzed"))
    render(run, charts=False)  # the Parquet files, not the charts
    return run


def _runs(root: Path, source: Path, factors: list[float]) -> Path:
    return derived_runs(source, root, factors)


def _factors(shift_at: int, seed: int = 3) -> list[float]:
    """20 runs' factors: 1% noise, 20% worse from ``shift_at`` on, run 4 a
    single 30% outlier."""
    rng = np.random.default_rng(seed)
    factors = list(rng.normal(1.0, 0.01, 20))
    factors[4] *= 1.3
    return [f * (1.2 if k >= shift_at else 1.0) for k, f in enumerate(factors)]


def test_the_command_names_the_shift_and_gates_on_recent_ones(
    tmp_path: Path, analyzed: Path, run_cli: Any
) -> None:
    old = _runs(tmp_path / "old", analyzed, _factors(shift_at=8))
    result = run_cli(
        "history", str(old), "--changes", "--metric", THROUGHPUT, "--out", str(tmp_path / "o")
    )
    assert result.code == 0, result.err
    named = [line for line in result.out.splitlines() if line.startswith("  etcd-")]
    # each database's throughput fell at run 8 (not at the outlier, run 4)
    assert len(named) == 2 and all("from run run-8 " in line for line in named), result.out
    assert all("slower" in line and "run-8" in line for line in named)
    chart = (tmp_path / "o" / "charts" / "avg-throughput.svg").read_text()
    assert chart.count("stroke-dasharray") >= 2  # each shift drawn as a dashed line
    # the shift is 12 runs old: not in the newest 5, the gate passes ...
    assert run_cli("history", str(old), "--changes", "--check").code == 0
    # ... and fails on a shift in them
    new = _runs(tmp_path / "new", analyzed, _factors(shift_at=16))
    gated = run_cli("history", str(new), "--changes", "--check", "--metric", THROUGHPUT)
    assert gated.code == EXIT_RUN_FAILED, gated.out + gated.err
    assert "shift(s) for the worse beyond 5% in the newest 5 runs" in gated.err
    assert "from run run-16 " in gated.err
    document = run_cli("history", str(new), "--changes", "--check", "--json")
    found = json.loads(document.out)
    jsonschema.Draft202012Validator(load_schema("history")).validate(found)
    points = found["changes"]["points"]
    assert {p["run_id"] for p in points} == {"run-16"} and all(p["regression"] for p in points)
    assert found["changes"]["recent_runs"] == 5 and found["changes"]["regressions"] == len(points)
