"""Imports run one way: no module imports itself back through others, and no
part of the package (``dbtester.<part>``) depends on a part that depends on it.

Every import counts — at the top, inside functions, under TYPE_CHECKING — so a
cycle cannot hide behind a lazy import."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.graph import find_cycle

PACKAGE = Path(__file__).resolve().parents[2] / "dbtester"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> Iterator[str]:
    """The dbtester modules ``path`` imports (the longest known name)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c` imports the module a.b.c when there is one, else a.b.
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.append(submodule if submodule in modules else node.module)
        for name in names:
            known = _known(name, modules)
            if known.startswith("dbtester"):
                yield known


def _known(name: str, modules: set[str]) -> str:
    """``name``, or the nearest enclosing module that exists ("" for none)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _graph() -> dict[str, set[str]]:
    files = {
        _module_name(p): p
        for p in PACKAGE.rglob("*.py")
        if "proto" not in p.relative_to(PACKAGE).parts
    }
    modules = set(files)
    return {name: set(_imports(path, modules)) - {name} for name, path in files.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_module_imports_itself_back() -> None:
    cycle = find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_part_of_the_package_depends_on_a_part_that_depends_on_it() -> None:
    parts: dict[str, set[str]] = {}
    for module, imported in _graph().items():
        # The package root only names the version; every part may use it.
        edges = {_part(m) for m in imported} - {_part(module), ""}
        parts.setdefault(_part(module), set()).update(edges)
    cycle = find_cycle(parts)
    assert cycle is None, "dbtester parts in a cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    ("part", "forbidden"),
    [
        ("util", {"results", "config", "databases", "load", "agent", "control", "analyze"}),
        (
            "results",
            {"config", "databases", "load", "agent", "control", "analyze", "report", "history"},
        ),
        (
            "analyze",
            {
                "report",
                "render",
                "compare",
                "control",
                "load",
                "agent",
                "config",
                "databases",
                "history",
            },
        ),
        ("report", {"render", "compare", "control", "load", "agent", "history"}),
        # workload types sit below config, load and analyze: each asks them
        (
            "workloads",
            {"config", "load", "control", "agent", "analyze", "report", "render", "history"},
        ),
        ("publish", {"config", "control", "analyze", "report", "cli", "history"}),
        # history reads results above analysis; it runs nothing and renders no run
        ("history", {"control", "load", "agent", "config", "databases", "render", "cli"}),
    ],
)
def test_lower_layers_import_nothing_above_them(part: str, forbidden: set[str]) -> None:
    used = {
        _part(m) for module, imported in _graph().items() if _part(module) == part for m in imported
    }
    assert not used & forbidden, f"dbtester.{part} imports {sorted(used & forbidden)}"


def test_the_walk_sees_lazy_imports() -> None:
    """The check would be empty if it missed imports inside functions."""
    graph = _graph()
    assert "dbtester.render" in graph["dbtester.cli"]  # imported inside a command
    assert "dbtester.results" in graph["dbtester.analyze"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
