"""The docs site's generated pages: the test-case reference and the results
schema's history are written from the code, so these tests keep the code
able to say everything the pages need."""

from __future__ import annotations

import re

import pytest

from dbtester.config.model import TestCase, Workload
from dbtester.config.reference import SECTIONS, missing_descriptions, render_reference
from dbtester.databases import KINDS
from dbtester.results.schema import HISTORY, SCHEMA_VERSION, UPGRADES


def test_every_key_has_a_meaning() -> None:
    assert missing_descriptions() == []


def test_the_reference_lists_every_key_with_its_default_and_bounds() -> None:
    page = render_reference()
    for _, _, model in SECTIONS:
        for name in model.model_fields:
            assert f"| `{name}` |" in page, name
    for kind in KINDS.values():
        for name in kind.flags_model.model_fields:
            assert f"| `{name}` |" in page, name
    row = next(line for line in page.splitlines() if line.startswith("| `clients` |"))
    default = Workload.model_fields["clients"].default
    assert f"`{default}`" in row and "≥ 1" in row and "≤ 100,000" in row
    repeat = next(line for line in page.splitlines() if line.startswith("| `repeat` |"))
    assert "`auto`" in repeat and "≤ 100" in repeat


def test_a_key_without_a_meaning_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    field = TestCase.model_fields["title"]
    monkeypatch.setattr(field, "description", None)
    assert missing_descriptions() == ["Top level.title"]


def test_the_schema_history_has_one_entry_per_version() -> None:
    assert len(HISTORY) == SCHEMA_VERSION
    assert sorted(UPGRADES) == list(range(1, SCHEMA_VERSION))
    assert all(re.search(r"\w", entry) for entry in HISTORY)
