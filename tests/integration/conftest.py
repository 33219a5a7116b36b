"""Integration tests use real database binaries, installed once per machine.

They share one DBTESTER_HOME (``$DBTESTER_TEST_HOME``, default
``~/.cache/dbtester-tests``) so a second ``make test`` does not build again;
tests that need a clean slate make their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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


@pytest.fixture(scope="session")
def installed_home(shared_home: Path) -> Callable[[str, str], str]:
    """Install KIND@VERSION into the shared test home (once per machine) and
    return that home, for agents started with DBTESTER_HOME pointing at it."""
    from dbtester.databases import get_kind
    from dbtester.install import Reporter

    def install(kind: str, version: str) -> str:
        previous = os.environ.get("DBTESTER_HOME")
        os.environ["DBTESTER_HOME"] = str(shared_home)
        try:
            get_kind(kind).install(version, Reporter())
        finally:
            if previous is None:
                del os.environ["DBTESTER_HOME"]
            else:
                os.environ["DBTESTER_HOME"] = previous
        return str(shared_home)

    return install
