"""A workload type is one module: no code outside ``dbtester/workloads/``
compares a workload's ``type`` with a type's name, matches on it, or keys a
dict by type names; a database kind's name likewise stays in its module.
Code asks the workload (or the kind) instead, so a new type or kind is a new
module, not edits in eight files. The checks read the code's syntax tree."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbtester.databases import KINDS
from dbtester.workloads import TYPES, workload_of

PACKAGE = Path(__file__).resolve().parents[2] / "dbtester"
#: where each name may be spelled in comparisons
HOMES = {"type": PACKAGE / "workloads", "kind": PACKAGE / "databases"}


def _mentions(node: ast.AST, tag: str) -> bool:
    """``node`` reads a ``tag`` (``x.type``, ``x["type"]``, ``x.get("type")``,
    a variable named like it)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == tag:
            return True
        if isinstance(sub, ast.Name) and tag in sub.id.lower():
            return True
        if isinstance(sub, ast.Constant) and sub.value == tag:
            return True
    return False


def _names_in(node: ast.AST) -> set[str]:
    """The string constants ``node`` is made of (one, or a tuple/list/set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    found: set[str] = set()
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        for element in node.elts:
            found |= _names_in(element)
    return found


def switches(source: str, tag: str, names: set[str]) -> Iterator[tuple[int, str]]:
    """(line, what) for each place ``source`` switches on a ``tag`` name."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            spelled = set().union(*(_names_in(s) for s in sides)) & names
            others = [s for s in sides if not _names_in(s)]
            if spelled and any(_mentions(s, tag) for s in others):
                yield node.lineno, f"compares {tag} with {sorted(spelled)}"
        elif isinstance(node, ast.Match) and _mentions(node.subject, tag):
            for case in node.cases:
                values = {
                    str(p.value.value)
                    for p in ast.walk(case.pattern)
                    if isinstance(p, ast.MatchValue) and isinstance(p.value, ast.Constant)
                }
                if values & names:
                    yield node.lineno, f"matches {tag} on {sorted(values & names)}"
        elif isinstance(node, ast.Dict):
            keys = {str(k.value) for k in node.keys if isinstance(k, ast.Constant)} & names
            # two names, one of them no other word ("read" and "write" are also operations)
            if len(keys) >= 2 and keys - {"read", "write"}:
                yield node.lineno, f"a dict keyed by {tag} names {sorted(keys)}"


def _files(tag: str) -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "proto" or path.is_relative_to(HOMES[tag]):
            continue
        yield path


@pytest.mark.parametrize(
    ("tag", "names"), [("type", set(TYPES)), ("kind", set(KINDS))], ids=["type", "kind"]
)
def test_no_code_outside_its_module_switches_on_a_name(tag: str, names: set[str]) -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in _files(tag)
        for line, what in switches(path.read_text(), tag, names)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'if w.type == "mixed": pass',
        'if workload.type in ("read", "mixed"): pass',
        'ok = "watch" != db.workload.type',
        'if raw.get("type") == "write": pass',
        'match w.type:\n    case "watch":\n        pass',
        'KEYS = {"read": 1, "write": 2, "watch": 3}',
    ],
)
def test_the_check_sees_each_way_of_switching(source: str) -> None:
    assert list(switches(source, "type", set(TYPES))), source


@pytest.mark.parametrize(
    "source",
    [
        'kind = "write" if write else "read"',  # an operation's kind, not a type
        'ops = {"read": 1, "write": 2}',
        'if op == "read": pass',
    ],
)
def test_the_check_leaves_other_uses_of_the_words_alone(source: str) -> None:
    assert not list(switches(source, "type", set(TYPES))), source


def test_every_type_answers_what_the_rest_of_dbtester_asks() -> None:
    """Each type builds its plan parts and says what it does, from its own keys."""
    for name, cls in TYPES.items():
        extra: dict[str, object] = {"rate": 10.0} if cls.WATCHES else {}
        # a lock load's clients are its lockers, each on a connection of its own
        clients = (
            {"lockers": 2} if "lockers" in cls.model_fields else {"clients": 2, "connections": 1}
        )
        workload = workload_of(type=name, requests=10, **clients, **extra)
        assert type(workload) is cls and workload.type == name == cls.type_name()
        assert "10" in workload.describe("10")
        mix = workload.plan_mix()
        total = mix["read"] + mix["update"] + mix["insert"] + mix["read_modify_write"]
        assert total == pytest.approx(1.0), (name, mix)
        keys = workload.plan_keys(first_key=5, existing=None)
        assert keys["first"] == 5
        assert (workload.plan_watch() is not None) == cls.WATCHES
        assert workload.as_raw()["type"] == name


def test_the_rows_a_type_declares_are_the_ones_analysis_computes() -> None:
    """A type owns its row names; analysis computes those, under those names."""
    from dbtester.analyze import figures
    from dbtester.results import OPERATIONS

    assert figures.WATCH_ROWS == TYPES["watch"].ROWS

    def per_operation(ops: tuple[str, ...]) -> list[str]:
        return [figures.operation_row(o, r) for o in ops for r in figures.OPERATION_ROWS]

    mixed = per_operation(OPERATIONS[:4])
    assert (*mixed, figures.CONFLICT_ROW, figures.STALE_ROW) == TYPES["mixed"].ROWS
    verbs = per_operation(("get", "list", "create", "update", "delete", "event"))
    counted = (
        *figures.COUNTER_ROWS,
        *figures.COMPACTION_ROWS,
        *figures.INFORMER_ROWS,
        *figures.EVENT_ROWS,
        *figures.EXPIRATION_ROWS,
        *figures.LIST_RATE_ROWS,
    )
    assert (*verbs, figures.CONFLICT_ROW, *counted) == TYPES["kubernetes"].ROWS
    assert all(not cls.ROWS for name, cls in TYPES.items() if name in ("write", "read"))
