"""Bad input exits 2, with a message that says what to do, wherever it is
found: an --out that holds another run, a NEW that exists without --force,
and agents for a test case that has no hosts. Nothing here starts a database
or opens a connection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
