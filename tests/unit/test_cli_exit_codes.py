"""Bad input exits 2, with a message that says what to do, wherever it is
found: an --out that holds another run, a NEW that exists without --force,
agents for a test case that has no hosts, and compare/history without their
directories (which --list-metrics does not need). Nothing here starts a
database or opens a connection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dbtester.analyze.stats import COMPARED_BY_DEFAULT, METRICS
from dbtester.errors import EXIT_BAD_INPUT, EXIT_OK
from tests.conftest import CONFIGS, LEGACY

QUICKSTART = CONFIGS / "quickstart.yaml"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A $DBTESTER_HOME of the test's own: nothing may be installed into it."""
    path = tmp_path / "home"
    monkeypatch.setenv("DBTESTER_HOME", str(path))
    return path


def test_run_into_a_results_directory_in_use_exits_2(
    tmp_path: Path, home: Path, run_cli: Any
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("{}")
    result = run_cli("run", str(QUICKSTART), "--out", str(out))
    assert result.code == EXIT_BAD_INPUT, result.err
    assert "choose another --out" in result.err and "remove" in result.err
    assert [p.name for p in out.iterdir()] == ["result.json"]  # left as it was
    assert not (home / "runs").exists()  # refused before anything started


def test_convert_onto_an_existing_file_exits_2(tmp_path: Path, run_cli: Any) -> None:
    new = tmp_path / "new.yaml"
    new.write_text("keep me")
    result = run_cli("convert", str(LEGACY / "write-one-client.yaml"), str(new))
    assert result.code == EXIT_BAD_INPUT and "pass --force" in result.err, result.err
    assert new.read_text() == "keep me"
    forced = run_cli("convert", str(LEGACY / "write-one-client.yaml"), str(new), "--force")
    assert forced.code == EXIT_OK, forced.err
    assert new.read_text().startswith("# Converted by dbtester")


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_agents_for_a_test_case_without_hosts_exit_2(action: str, home: Path, run_cli: Any) -> None:
    result = run_cli("agents", action, str(QUICKSTART))
    assert result.code == EXIT_BAD_INPUT, result.err
    assert "has no `hosts:`" in result.err and "no agents" in result.err
    assert f"dbtester run {QUICKSTART}" in result.err


@pytest.mark.parametrize("command", ["compare", "history"])
def test_list_metrics_needs_no_directories(command: str, run_cli: Any) -> None:
    result = run_cli(command, "--list-metrics")
    assert result.code == EXIT_OK, result.err
    lines = result.out.splitlines()
    assert [line.split("  ")[0].rstrip() for line in lines] == list(METRICS)
    by_name = {line.split("  ")[0].rstrip(): line for line in lines}
    assert "higher is better" in by_name["AVG-THROUGHPUT"]
    assert "lower is better" in by_name["Latency p99"]
    by_default = [n for n, line in by_name.items() if "by default" in line]
    assert by_default == [n for n in METRICS if n in COMPARED_BY_DEFAULT]


def test_compare_without_both_directories_is_a_usage_error(tmp_path: Path, run_cli: Any) -> None:
    for args in ([], [str(tmp_path)]):
        result = run_cli("compare", *args)
        assert result.code == EXIT_BAD_INPUT, result.err
        assert "DIR_A and DIR_B" in result.err and "--list-metrics" in result.err


def test_history_without_a_source_is_a_usage_error(run_cli: Any) -> None:
    result = run_cli("history", "--check")
    assert result.code == EXIT_BAD_INPUT and "give SOURCE" in result.err, result.err


def test_bisect_into_a_folder_of_something_else_exits_2_before_anything_runs(
    tmp_path: Path, home: Path, run_cli: Any
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["--good", "3.5.17", "--bad", "3.6.8", "--metric", "AVG-THROUGHPUT"]
    result = run_cli("bisect", str(QUICKSTART), *args, "--versions", "3.6.0", "--out", str(out))
    assert result.code == EXIT_BAD_INPUT, result.err
    assert "is not a bisect folder" in result.err and "--out" in result.err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert not (home / "runs").exists()
    unknown = run_cli(
        "bisect",
        str(QUICKSTART),
        "--good",
        "3.5.17",
        "--bad",
        "3.6.8",
        "--metric",
        "SPEED",
        "--out",
        str(tmp_path / "b"),
    )
    assert unknown.code == EXIT_BAD_INPUT and "allowed: AVG-THROUGHPUT" in unknown.err
    assert not (tmp_path / "b").exists()
