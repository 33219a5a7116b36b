"""What a test case that does not load says: its problems as "line:col: message"."""

from __future__ import annotations

import pytest

from dbtester.config.load import load_test_case_text
from dbtester.errors import ConfigError

__all__ = ["problems_of"]


def problems_of(text: str) -> list[str]:
    """The problems loading ``text`` (as case.yaml) reports; it must not load."""
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(text, "case.yaml")
    return [f"{p.line}:{p.column}: {p.message}" for p in caught.value.problems]
