"""Test cases: the typed model, the strict loader and the original format's converter.

The names are loaded when first used: an agent reads the test-case model's
constants and must not pay for the loader and the original format's
converter (half a second of imports) on every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dbtester.config.load import Loaded, load_test_case, load_test_case_text, parse_test_case
    from dbtester.config.model import DatabaseSpec, Host, Publish, TestCase, Workload

__all__ = [
    "DatabaseSpec",
    "Host",
    "Loaded",
    "Publish",
    "TestCase",
    "Workload",
    "load_test_case",
    "load_test_case_text",
    "parse_test_case",
]

#: the module each name lives in
_HOMES = {
    "Loaded": "load",
    "load_test_case": "load",
    "load_test_case_text": "load",
    "parse_test_case": "load",
    "DatabaseSpec": "model",
    "Host": "model",
    "Publish": "model",
    "TestCase": "model",
    "Workload": "model",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"dbtester.config.{home}"), name)
