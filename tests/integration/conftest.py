"""Integration tests use real database binaries, installed once per machine.

They share one DBTESTER_HOME (``$DBTESTER_TEST_HOME``, default
``~/.cache/dbtester-tests``) so a second ``make test`` does not build again;
tests that need a clean slate make their own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def shared_home() -> Path:
    home = Path(os.environ.get("DBTESTER_TEST_HOME") or Path.home() / ".cache" / "dbtester-tests")
    home.mkdir(parents=True, exist_ok=True)
    return home


@pytest.fixture
def use_shared_home(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DBTESTER_HOME", str(shared_home))
    return shared_home
