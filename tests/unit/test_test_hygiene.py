"""No test module imports from another test module, nor a private name from
anywhere under tests/: shared helpers live in tests/support (or a conftest
fixture). Importing a test module makes pytest's collection and the import
disagree about what runs, and ties a test to another file's private helper;
the 36 such imports this replaced had grown one copy-paste at a time."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

TESTS = ROOT / "tests"

#: imports in modules someone else is refactoring now; each entry is
#: (importing file, module, name). Delete an entry when its import goes: the
#: stale-entry test below fails until then.
PENDING: set[tuple[str, str, str]] = set()


def offences(source: str) -> list[tuple[str, str]]:
    """(module, name) of every import in ``source`` that breaks the rule: any
    name from a ``test_*`` module, or a private name from a module under
    ``tests``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            if not module.startswith("tests."):
                continue
            from_test = module.rsplit(".", 1)[-1].startswith("test_")
            for alias in node.names:
                if from_test or alias.name.startswith("_"):
                    found.append((module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tests.") and alias.name.rsplit(".", 1)[-1].startswith(
                    "test_"
                ):
                    found.append((alias.name, "*"))
    return found


def _all_offences() -> set[tuple[str, str, str]]:
    return {
        (str(path.relative_to(ROOT)), module, name)
        for path in sorted(TESTS.rglob("*.py"))
        for module, name in offences(path.read_text())
    }


def test_no_test_module_imports_another_or_a_private_helper() -> None:
    new = sorted(_all_offences() - PENDING)
    assert not new, (
        "import these from tests/support (or make them conftest fixtures) instead:\n"
        + "\n".join(f"{path}: from {module} import {name}" for path, module, name in new)
    )


def test_the_pending_exceptions_are_still_needed() -> None:
    stale = sorted(PENDING - _all_offences())
    assert not stale, f"these imports are gone: delete them from PENDING: {stale}"


def test_the_rule_catches_what_it_forbids() -> None:
    """A self-test on synthetic sources: the check can fail."""
    assert offences("from tests.unit.test_analysis import START\n") == [
        ("tests.unit.test_analysis", "START")
    ]
    assert offences("from tests.support.cluster import _hidden, VERSIONS\n") == [
        ("tests.support.cluster", "_hidden")
    ]
    assert offences("import tests.e2e.test_run\n") == [("tests.e2e.test_run", "*")]
    assert offences("def f():\n    from tests.e2e.test_run import dbtester\n") == [
        ("tests.e2e.test_run", "dbtester")
    ]
    # what is allowed: shared helpers, conftest, product code (even private)
    assert (
        offences(
            "from tests.support.poll import poll_until\n"
            "from tests.conftest import ROOT\n"
            "from dbtester.control.run import _with_repeat\n"
        )
        == []
    )
