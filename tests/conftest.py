"""Shared fixtures: running the CLI in-process, and where test cases live."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from dbtester.cli import main

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
REFERENCE = ROOT.parent / "shared" / "reference" / "dbtester-test-configs"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``dbtester ARGS`` through the real entry point; return code and output."""

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["dbtester", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
