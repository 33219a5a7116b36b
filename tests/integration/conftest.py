"""Integration tests use real database binaries, installed once per machine.

They share one DBTESTER_HOME (``$DBTESTER_TEST_HOME``, default
``~/.cache/dbtester-tests``) so a second ``make test`` does not build again;
tests that need a clean slate make their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
