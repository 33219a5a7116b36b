"""``dbtester history``: runs found under a folder and read with real DuckDB
(old ones converted from result.json), the table, the trend charts, the
Parquet files each run writes, and the ``--check`` gate's statistics."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from dbtester.analyze.stats import METRICS
from dbtester.errors import EXIT_BAD_INPUT, EXIT_RUN_FAILED
from dbtester.history import check_history, load_history, open_source
from dbtester.history.check import predict
from dbtester.results import Records, ResultsDir
from tests.conftest import ROOT
from tests.support.data import derived_runs

V1 = ROOT / "tests" / "fixtures" / "results-v1"


@pytest.fixture(scope="module")
def analyzed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The version-1 fixture re-analyzed once for the module (5 s): now with
    its Parquet files."""
    from dbtester.cli import main

    run = Path(shutil.copytree(V1, tmp_path_factory.mktemp("v1") / "analyzed"))
    code: object = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", ["dbtester", "analyze", str(run)])
        try:
            main()
        except SystemExit as done:  # main() exits only when something failed
            code = done.code
    assert code in (0, None)
    return run


@pytest.fixture
def analyzed(analyzed_once: Path, tmp_path: Path) -> Path:
    """A copy of it of the test's own."""
    return Path(shutil.copytree(analyzed_once, tmp_path / "analyzed"))


def _history(tmp_path: Path, source: Path, factors: list[float]) -> Path:
    """Runs a day apart derived from ``source``, figures scaled by each factor."""
    return derived_runs(source, tmp_path / "history", factors)


def test_each_run_writes_its_parquet_partitioned_by_database_and_date(analyzed: Path) -> None:
    files = sorted(p.relative_to(analyzed).as_posix() for p in analyzed.rglob("*.parquet"))
    expected = [
        f"parquet/{table}/database={db}/date=2026-11-22/20261122T053543-287ceb.parquet"
        for table in ("figures", "requests", "series")
        for db in ("etcd-v3.5", "etcd-v3.6")
    ]
    assert files == expected
    for path in analyzed.rglob("*.parquet"):  # partition keys in the path only (Spark)
        names = pq.read_schema(path).names
        assert "database" not in names and "date" not in names and "run_id" in names
    glob = str(analyzed / "parquet" / "requests" / "*" / "*" / "*.parquet")
    rows = duckdb.execute(
        f"SELECT database, version, count(*), count(*) FILTER (code = 'ok')"
        f" FROM read_parquet('{glob}', hive_partitioning = true) GROUP BY ALL ORDER BY 1"
    ).fetchall()
    for (database, version, count, ok), db_id in zip(rows, ["etcd-v3.5", "etcd-v3.6"], strict=True):
        records = Records.load(analyzed / db_id / "client-latency.npz")
        assert (database, count, ok) == (db_id, len(records), records.counts()["ok"])
        assert version.startswith(db_id.removeprefix("etcd-v"))
    series = str(analyzed / "parquet" / "series" / "*" / "*" / "*.parquet")
    sources = duckdb.execute(
        f"SELECT DISTINCT source FROM read_parquet('{series}') ORDER BY 1"
    ).fetchall()
    assert [s for (s,) in sources] == ["client", "server-0", "server-1", "server-2"]


def test_an_old_directory_is_converted_on_read_to_the_same_figures(analyzed: Path) -> None:
    old = load_history(open_source(str(V1)))
    new = load_history(open_source(str(analyzed)))
    assert (old.converted, new.converted) == (1, 0)
    assert old.runs == new.runs
    summary = ResultsDir(V1).read_summary()
    assert summary is not None
    by_id = {db.id: db.figures for db in summary.databases}
    for run in old.runs:
        assert run.values["AVG-THROUGHPUT"] == (by_id[run.database]["AVG-THROUGHPUT"],)


def test_the_table_has_a_line_per_run_and_the_charts_a_line_per_database(
    tmp_path: Path, analyzed: Path, run_cli
) -> None:
    root = _history(tmp_path, analyzed, [1.0, 1.01, 0.99])
    out = tmp_path / "out"
    result = run_cli("history", str(root), "--metric", "AVG-THROUGHPUT", "--out", str(out))
    assert result.code == 0, result.err
    assert result.out.count("etcd-v3.5 (etcd 3.5.17)") == 1
    for k in range(3):
        assert result.out.count(f"run-{k} ") == 2  # once per database
    assert (out / "history.txt").read_text() in result.out
    chart = ET.parse(out / "charts" / "avg-throughput.svg").getroot()
    assert chart.tag.endswith("svg")
    text = (out / "charts" / "avg-throughput.svg").read_text()
    assert "etcd-v3.5" in text and "etcd-v3.6" in text
    assert len((out / "history.csv").read_text().splitlines()) == 1 + 3 * 2


def test_filters_by_database_and_date(tmp_path: Path, analyzed: Path) -> None:
    root = _history(tmp_path, analyzed, [1.0, 1.0, 1.0])
    source = open_source(str(root))
    only = load_history(source, databases=["etcd-v3.6"])
    assert {r.database for r in only.runs} == {"etcd-v3.6"} and len(only.runs) == 3
    newest = max(r.started for r in only.runs).date()
    assert [r.run_id for r in load_history(source, since=newest).runs] == ["run-2", "run-2"]


def test_check_exits_1_on_a_slower_newest_run_and_0_without(
    tmp_path: Path, analyzed: Path, run_cli
) -> None:
    steady = _history(tmp_path / "a", analyzed, [1.0, 1.01, 0.99, 1.005])
    assert run_cli("history", str(steady), "--check").code == 0
    slower = _history(tmp_path / "b", analyzed, [1.0, 1.01, 0.99, 1.5])
    result = run_cli("history", str(slower), "--check")
    assert result.code == EXIT_RUN_FAILED, result.err
    assert "regression(s) beyond 5%" in result.err
    assert "etcd-v3.5 Latency p99" in result.err and "run-3" in result.err
    # a regression smaller than the threshold passes
    assert run_cli("history", str(slower), "--check", "--threshold", "60").code == 0
    # against one named run, one value on each side: not judged (as `compare`)
    named = run_cli("history", str(slower), "--check", "--baseline", "run-0")
    assert named.code == 0 and "+50.0% ?" in named.out
    assert "cannot be judged" in named.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "NOPE"], "unknown metric NOPE"),
        (["--check", "--baseline", "no-such-run"], "baseline run 'no-such-run'"),
        (["--since", "yesterday"], "Invalid value for '--since'"),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path, analyzed: Path, run_cli, args: list[str], message: str
) -> None:
    root = _history(tmp_path, analyzed, [1.0, 1.0])
    result = run_cli("history", str(root), *args)
    assert result.code == EXIT_BAD_INPUT
    assert message in result.err


def test_a_source_that_is_not_there_exits_2(tmp_path: Path, run_cli) -> None:
    for source in (str(tmp_path / "missing"), "ftp://x/y", "s3://"):
        result = run_cli("history", source)
        assert result.code == EXIT_BAD_INPUT, source


def test_an_empty_folder_has_no_runs(tmp_path: Path, run_cli) -> None:
    result = run_cli("history", str(tmp_path), "--check")
    assert result.code == 0 and "no runs found" in result.out


def test_prediction_test_of_one_new_value() -> None:
    metric = METRICS["Latency p99"]
    baseline = [100.0, 102.0, 98.0, 101.0, 99.0]
    near, far = predict(metric, baseline, 101.0), predict(metric, baseline, 120.0)
    assert not near.significant and near.verdict == "~"
    assert far.worse and far.verdict == "slower" and far.p_value is not None
    assert far.p_value < 0.01
    assert predict(metric, [100.0, 100.0], 100.0).p_value == 1.0
    assert predict(metric, [100.0, 100.0], 101.0).worse
    assert predict(metric, [100.0], 150.0).p_value is None  # one baseline value: no spread


def test_check_uses_welch_with_trials_on_both_sides(tmp_path: Path, analyzed: Path) -> None:
    root = _history(tmp_path, analyzed, [1.0, 1.02, 0.98, 1.01, 1.3])
    history = load_history(open_source(str(root)))
    found = check_history(history, ["AVG-THROUGHPUT"], baseline_runs=3)
    assert {v.baseline for v in found.verdicts} == {("run-1", "run-2", "run-3")}
    assert all(v.change.verdict == "slower" for v in found.verdicts)
    assert len(found.regressions) == 2


def _servers(run: Path, cpu_model: str) -> None:
    """Say in ``run``'s result.json that every database's members ran on ``cpu_model``."""
    summary = json.loads((run / "result.json").read_text())
    for db in summary["databases"]:
        db["servers"] = [{"cpu_model": cpu_model, "cores": 8, "kernel": "Linux 6.1"}]
    (run / "result.json").write_text(json.dumps(summary))


def test_check_gives_no_verdict_across_machines(tmp_path: Path, analyzed: Path, run_cli) -> None:
    """A nightly runner moved to another CPU: neither a pass nor a regression."""
    root = _history(tmp_path, analyzed, [1.0, 1.01, 0.99, 1.5])
    for k in range(3):
        _servers(root / f"run-{k}", "AMD EPYC 7B13")
    _servers(root / "run-3", "Intel(R) Xeon(R) Platinum 8375C")
    result = run_cli("history", str(root), "--check")
    assert result.code == EXIT_BAD_INPUT, result.out + result.err
    assert "etcd-v3.5 run-3 against run-0, run-1, run-2: servers cpu_model" in result.err
    assert "--across-environments" in result.err
    # asked for, the check is made (and finds the regression), the difference said
    result = run_cli("history", str(root), "--check", "--across-environments")
    assert result.code == EXIT_RUN_FAILED, result.out + result.err
    assert "measured on different machines (checked anyway" in result.out
    document = run_cli("history", str(root), "--check", "--across-environments", "--json")
    assert any("Xeon" in e for e in json.loads(document.out)["check"]["environments"])
    # the same machine throughout: judged as before
    _servers(root / "run-3", "AMD EPYC 7B13")
    assert run_cli("history", str(root), "--check").code == EXIT_RUN_FAILED
