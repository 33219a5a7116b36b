"""Repeated trials, end to end from the files: a results directory of three
trials per database (made from the real v1 fixture, with each trial's request
times stretched by a known factor) renders means with intervals, a
THROUGHPUT-CV row, a comparison with verdicts, the trial chart and the
schema-3 summary; ``dbtester compare`` gates on it."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dbtester.results import ResultsDir
from tests.support.data import IDS, make_trials


@pytest.fixture
def slower(tmp_path: Path) -> Path:
    """3.6's trials take 30% longer than 3.5's (each trial a little different)."""
    return make_trials(tmp_path / "run", {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.3, 1.32, 1.28]})


def test_trials_render_means_intervals_and_verdicts(run_cli: Any, slower: Path) -> None:
    result = run_cli("analyze", str(slower))
    assert result.code == 0, result.err
    table = (slower / "summary.txt").read_text()
    comparison = (slower / "comparison.txt").read_text()
    assert result.out == table + "\n" + comparison
    # the answer closes the console's output, as it opens the README
    summary = [line for line in result.err.splitlines() if line.startswith("summary: ")]
    assert summary and result.err.rstrip().splitlines()[-2].startswith("summary: ")
    assert any("AVG-THROUGHPUT" in line or "throughput" in line for line in summary), summary
    readme = (slower / "README.md").read_text()
    assert all(line.removeprefix("summary: ") in readme for line in summary)
    throughput = next(line for line in table.splitlines() if " AVG-THROUGHPUT |" in line)
    assert throughput.count("req/sec ±") == 2, throughput
    cv = next(line for line in table.splitlines() if " THROUGHPUT-CV |" in line)
    assert cv.count(" %") == 2
    assert "Compared with etcd v3.5.17 (3 trials each" in comparison
    verdicts = {
        line.split()[0] + (" " + line.split()[1] if line.split()[0] == "Latency" else ""): line
        for line in comparison.splitlines()
        if line.startswith("    ")
    }
    assert verdicts["AVG-THROUGHPUT"].rstrip().endswith("slower")
    assert " -23." in verdicts["AVG-THROUGHPUT"]  # 1 / 1.3
    # the servers' samples are the same files in every trial: no difference
    assert verdicts["SERVER-MAX-CPU-USAGE"].rstrip().endswith("~")
    assert (slower / "charts" / "THROUGHPUT-BY-TRIAL.svg").exists()
    readme = (slower / "README.md").read_text()
    assert comparison.strip() in readme and "THROUGHPUT-BY-TRIAL.svg" in readme


def test_the_summary_keeps_every_trial(slower: Path, run_cli: Any) -> None:
    assert run_cli("analyze", "--no-charts", str(slower)).code == 0
    summary = ResultsDir(slower).read_summary()
    assert summary is not None and summary.repeat == 3
    first = summary.databases[0]
    assert first.trials == 3 and len(first.trial_figures) == 3
    values = [f["AVG-THROUGHPUT"] for f in first.trial_figures]
    assert isinstance(first.figures["AVG-THROUGHPUT"], float)
    assert first.figures["AVG-THROUGHPUT"] == pytest.approx(np.mean(values))  # type: ignore[arg-type]
    assert first.intervals["AVG-THROUGHPUT"] > 0
    verdicts = {(c.database, c.row): c.verdict for c in summary.comparisons}
    assert verdicts[(IDS[1], "AVG-THROUGHPUT")] == "slower"


def test_compare_gates_on_a_regression(tmp_path: Path, run_cli: Any) -> None:
    same = {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]}
    a = make_trials(tmp_path / "a", same)
    b = make_trials(tmp_path / "b", {**same, IDS[1]: [1.3, 1.32, 1.28]})
    # A against itself: nothing changed
    result = run_cli("compare", str(a), str(a))
    assert result.code == 0, result.err
    assert "regression" not in result.err
    # 3.6 in B is about 23% slower: worse than 5%, exit 1 naming it
    result = run_cli("compare", str(a), str(b), "--threshold", "5")
    assert result.code == 1, result.out + result.err
    assert "etcd-v3.6 AVG-THROUGHPUT" in result.err and "slower" in result.err
    # a threshold above the change lets it pass
    assert run_cli("compare", str(a), str(b), "--threshold", "40").code == 0
    # and so does a significance level below the regressions' p-values, which is said
    found = json.loads(run_cli("compare", str(a), str(b), "--json").out)
    p = min(m["p_value"] for db in found["databases"] for m in db["metrics"] if m["regression"])
    assert found["alpha"] == 0.05 and 0 < p < 0.05
    result = run_cli("compare", str(a), str(b), "--alpha", f"{p / 2:.3g}")
    assert result.code == 0, result.out + result.err
    assert f"a verdict where p < {float(f'{p / 2:.3g}'):g}" in result.out
    assert run_cli("compare", str(a), str(b), "--alpha", "1").code == 2


def test_compare_bad_input_exits_2(tmp_path: Path, run_cli: Any) -> None:
    a = make_trials(tmp_path / "a", {IDS[0]: [1.0, 1.1]})
    result = run_cli("compare", str(a), str(a), "--metric", "SPEED")
    assert result.code == 2 and "unknown metric SPEED; allowed: AVG-THROUGHPUT" in result.err
    result = run_cli("compare", str(a), str(tmp_path / "missing"))
    assert result.code == 2 and "missing" in result.err
    newer = tmp_path / "newer"
    shutil.copytree(a, newer)
    summary = json.loads((newer / "result.json").read_text())
    (newer / "result.json").write_text(json.dumps({**summary, "schema_version": 99}))
    result = run_cli("compare", str(a), str(newer))
    assert result.code == 2 and "99" in result.err and result.err.count("\n") == 1


def test_databases_in_one_directory_only_are_listed(tmp_path: Path, run_cli: Any) -> None:
    a = make_trials(tmp_path / "a", {IDS[0]: [1.0, 1.1], IDS[1]: [1.0, 1.1]})
    b = make_trials(tmp_path / "b", {IDS[0]: [1.0, 1.1]})
    result = run_cli("compare", str(a), str(b))
    assert result.code == 0, result.err
    assert "only in A: etcd-v3.6" in result.out


def test_a_trial_in_the_wrong_directory_is_named(tmp_path: Path) -> None:
    from dbtester.errors import ResultsError

    root = make_trials(tmp_path / "run", {IDS[0]: [1.0, 1.1]})
    record = root / IDS[0] / "trial-2" / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "trial": 1}))
    with pytest.raises(ResultsError, match=r"trial-2/run\.json: says it is trial 1"):
        ResultsDir(root).load()
    # a trial directory without its run.json is a trial that never ran
    record.unlink()
    loaded = ResultsDir(root).load()
    assert [t.trial for t in loaded.databases[0].trials] == [1]


def test_compare_withholds_its_verdict_across_machines(tmp_path: Path, run_cli: Any) -> None:
    """Measured on main: a run on an Intel host against one on an AMD host
    gave +40.3% throughput and no word about the machines."""
    same = {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]}
    a = make_trials(tmp_path / "a", same)
    b = make_trials(tmp_path / "b", {**same, IDS[1]: [1.3, 1.32, 1.28]})
    summary = json.loads((b / "result.json").read_text())
    summary["environment"]["cpu_model"] = "Intel(R) Xeon(R) Platinum 8375C"
    (b / "result.json").write_text(json.dumps(summary))
    before = json.loads((a / "result.json").read_text())["environment"]["cpu_model"]
    # No verdict: neither a pass (0) nor a regression (1).
    result = run_cli("compare", str(a), str(b))
    assert result.code == 2, result.out + result.err
    assert "measured on different machines (client cpu_model" in result.err
    assert "Intel(R) Xeon(R) Platinum 8375C" in result.err and repr(before) in result.err
    assert "--across-environments" in result.err
    # Asked for, the verdict is given, and the difference is said.
    result = run_cli("compare", str(a), str(b), "--across-environments")
    assert result.code == 1, result.out + result.err
    assert "measured on different machines (compared anyway" in result.out
    assert "etcd-v3.6 AVG-THROUGHPUT" in result.err


def _set_servers(root: Path, db_id: str, cpu_model: str, sha: str = "") -> None:
    """Say in result.json that ``db_id``'s members ran on ``cpu_model``."""
    summary = json.loads((root / "result.json").read_text())
    for db in summary["databases"]:
        if db["id"] == db_id:
            db["servers"] = [{"cpu_model": cpu_model, "cores": 2, "kernel": "Linux 6.1"}]
            db["binaries"] = [sha] if sha else []
    (root / "result.json").write_text(json.dumps(summary))


def test_compare_withholds_its_verdict_when_the_servers_differ(
    tmp_path: Path, run_cli: Any
) -> None:
    """The controller on one machine, the members on others: a change of the
    servers' hardware is a change of machines too."""
    same = {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]}
    a = make_trials(tmp_path / "a", same)
    b = make_trials(tmp_path / "b", same)
    for root in (a, b):
        assert run_cli("analyze", "--no-charts", str(root)).code == 0
    _set_servers(a, IDS[1], "AMD EPYC 7B13")
    _set_servers(b, IDS[1], "Intel(R) Xeon(R) Platinum 8375C")
    result = run_cli("compare", str(a), str(b))
    assert result.code == 2, result.out + result.err
    assert f"{IDS[1]} servers cpu_model 'AMD EPYC 7B13' against 'Intel(R)" in result.err
    # servers not known on one side (a run from before schema 8): compared
    _set_servers(b, IDS[1], "")
    summary = json.loads((b / "result.json").read_text())
    for db in summary["databases"]:
        db["servers"] = []
    (b / "result.json").write_text(json.dumps(summary))
    assert run_cli("compare", str(a), str(b)).code == 0


def test_compare_names_a_version_built_twice(tmp_path: Path, run_cli: Any) -> None:
    same = {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]}
    a = make_trials(tmp_path / "a", same)
    b = make_trials(tmp_path / "b", same)
    for root in (a, b):
        assert run_cli("analyze", "--no-charts", str(root)).code == 0
    _set_servers(a, IDS[1], "AMD EPYC 7B13", "a" * 64)
    _set_servers(b, IDS[1], "AMD EPYC 7B13", "b" * 64)
    result = run_cli("compare", str(a), str(b))
    assert result.code == 0, result.out + result.err
    assert f"note: {IDS[1]}: etcd" in result.out
    assert f"ran from different files in A and B (sha256 {'a' * 12} against {'b' * 12})" in (
        result.out
    )
    assert IDS[0] not in result.out.split("note:")[1]  # the same build: not named


def _set_members(root: Path, db_id: str, cpu_model: str) -> None:
    for run in (root / db_id).glob("trial-*/run.json"):
        record = json.loads(run.read_text())
        for member in record["members"]:
            member["machine"] = {"cpu_model": cpu_model, "cores": 8, "kernel": "Linux 6.1"}
            member["binary_sha256"] = "c" * 64
        run.write_text(json.dumps(record))


def test_a_database_on_other_machines_is_named_in_the_run(tmp_path: Path, run_cli: Any) -> None:
    run = make_trials(tmp_path / "run", {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]})
    _set_members(run, IDS[0], "AMD EPYC 7B13")
    _set_members(run, IDS[1], "Intel(R) Xeon(R) Platinum 8375C")
    assert run_cli("analyze", "--no-charts", str(run)).code == 0
    readme = (run / "README.md").read_text()
    assert "its members ran on other machines than" in readme
    assert "servers cpu_model 'AMD EPYC 7B13' against 'Intel(R) Xeon(R)" in readme
    summary = json.loads((run / "result.json").read_text())
    servers = {db["id"]: [s["cpu_model"] for s in db["servers"]] for db in summary["databases"]}
    assert servers == {IDS[0]: ["AMD EPYC 7B13"], IDS[1]: ["Intel(R) Xeon(R) Platinum 8375C"]}
    assert all(db["binaries"] == ["c" * 64] for db in summary["databases"])
    # on the same machines, nothing is said
    _set_members(run, IDS[1], "AMD EPYC 7B13")
    assert run_cli("analyze", "--no-charts", str(run)).code == 0
    assert "other machines" not in (run / "README.md").read_text()


def _probe(trial: Path, probe_ns: list[int], steal_ms: int = 0) -> None:
    """Give a trial's client and server samples the probe's columns."""
    for path in [trial / "client-metrics.csv", *trial.glob("server-*-metrics.csv")]:
        lines = path.read_text().splitlines()
        out = [lines[0] + ",probe_ns,steal_ms"]
        for k, line in enumerate(lines[1:]):
            out.append(f"{line},{probe_ns[k % len(probe_ns)]},{steal_ms}")
        path.write_text("\n".join(out) + "\n")


def test_host_speed_rows_chart_and_the_slow_trial_named(tmp_path: Path, run_cli: Any) -> None:
    run = make_trials(tmp_path / "run", {IDS[0]: [1.0, 1.0, 1.0], IDS[1]: [1.0, 1.0, 1.0]})
    # speeds alternate 1,111 and 909 probes/s (mean 1,044); trial 2 of the
    # second database reads 750 a second throughout: 28% slower
    for db_id in IDS:
        for k in (1, 2, 3):
            slow = db_id == IDS[1] and k == 2
            _probe(run / db_id / f"trial-{k}", [1_333_333] if slow else [900_000, 1_100_000])
    assert run_cli("analyze", str(run)).code == 0
    table = (run / "summary.txt").read_text()
    rows = {r.split("|")[1].strip() for r in table.splitlines() if r.startswith("|")}
    assert {"HOST-SPEED", "HOST-SPEED-CV"} <= rows
    readme = (run / "README.md").read_text()
    assert "etcd v3.6.8: trial 2 ran while the client machine was 28% slower" in readme
    assert "trial 1 ran while" not in readme and "trial 3 ran while" not in readme
    assert (run / "charts" / "HOST-SPEED.svg").exists()
    figures = json.loads((run / "result.json").read_text())["databases"][0]["trial_figures"]
    # the least steady host: a member's four samples, 1,111 909 1,111 909 per second
    expected = (
        100
        * statistics.stdev([1e9 / 9e5, 1e9 / 11e5] * 2)
        / statistics.mean([1e9 / 9e5, 1e9 / 11e5])
    )
    assert figures[0]["HOST-SPEED-CV"] == pytest.approx(expected)


def test_steal_time_is_named(tmp_path: Path, run_cli: Any) -> None:
    run = make_trials(tmp_path / "run", {IDS[0]: [1.0]})
    _probe(run / IDS[0] / "trial-1", [1_000_000], steal_ms=500)
    assert run_cli("analyze", "--no-charts", str(run)).code == 0
    assert "the hypervisor took" in (run / "README.md").read_text()


def test_a_run_without_the_probe_has_no_host_rows(tmp_path: Path, run_cli: Any) -> None:
    run = make_trials(tmp_path / "run", {IDS[0]: [1.0, 1.0, 1.0]})
    assert run_cli("analyze", str(run)).code == 0
    assert "HOST-SPEED" not in (run / "summary.txt").read_text()
    assert not (run / "charts" / "HOST-SPEED.svg").exists()


def test_the_readme_and_report_open_with_what_differed(run_cli: Any, slower: Path) -> None:
    assert run_cli("analyze", str(slower)).code == 0
    readme = (slower / "README.md").read_text()
    summary = readme.split("## Summary\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # above the table, one line per database against the first, then how
    assert readme.index("## Summary") < readme.index("```")
    first, how = summary
    assert first.startswith("- etcd v3.6.8 against etcd v3.5.17: AVG-THROUGHPUT -23.")
    assert "(slower); no verdict on " in first and "SERVER-MAX-CPU-USAGE" in first
    assert how == "- 3 trials each; 95% intervals, Welch's t-test."
    page = (slower / "report.html").read_text()
    assert page.index('id="summary"') < page.index('id="results"')
    assert "etcd v3.6.8 against etcd v3.5.17: AVG-THROUGHPUT -23." in page


def test_the_summary_without_verdicts_says_why(tmp_path: Path, run_cli: Any) -> None:
    once = make_trials(tmp_path / "once", {IDS[0]: [1.0], IDS[1]: [1.3]})
    assert run_cli("analyze", "--no-charts", str(once)).code == 0
    assert "- One trial each: the table's differences against etcd v3.5.17 cannot be judged" in (
        (once / "README.md").read_text()
    )
    alone = make_trials(tmp_path / "alone", {IDS[0]: [1.0, 1.1, 0.9]})
    assert run_cli("analyze", "--no-charts", str(alone)).code == 0
    assert "- One database: nothing to compare" in (alone / "README.md").read_text()
    same = make_trials(tmp_path / "same", {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]})
    assert run_cli("analyze", "--no-charts", str(same)).code == 0
    assert "etcd v3.6.8 against etcd v3.5.17: no difference found; no verdict on" in (
        (same / "README.md").read_text()
    )
