"""The engine's modules import one way: a `crate::<module>` path (a use
statement or a path in code, tests included) between the crate's top-level
modules and folders never closes a cycle, as test_layers.py holds the
Python package to. Bottom to top: plan, records and outcome; transport;
workload; protocols; driver; lib.rs, the pyo3 boundary."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.graph import find_cycle

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "engine" / "src"

_COMMENT = re.compile(r"//[^\n]*")
_GROUP = re.compile(r"\bcrate::\{([^}]*)\}")
_PATH = re.compile(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)")


def module_of(path: Path, source: Path) -> str:
    """The top-level module a file belongs to: `lib` for lib.rs, else its
    first path component without `.rs`."""
    first = path.relative_to(source).parts[0]
    return first.removesuffix(".rs")


def imports(text: str) -> set[str]:
    """The top-level modules a Rust file names as `crate::<module>`
    (`crate::{a, b::c}` too), comments left out."""
    code = _COMMENT.sub("", text)
    names = set(_PATH.findall(code))
    for group in _GROUP.findall(code):
        for item in group.split(","):
            head = item.strip().split("::")[0].strip()
            if head and head != "self":
                names.add(head)
    return names


def graph(source: Path) -> dict[str, set[str]]:
    """Module -> the other top-level modules it imports."""
    edges: dict[str, set[str]] = {}
    for path in sorted(source.rglob("*.rs")):
        module = module_of(path, source)
        named = imports(path.read_text(encoding="utf-8")) - {module}
        edges.setdefault(module, set()).update(named)
    return edges


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_are_read_from_use_statements_and_paths(tmp_path: Path) -> None:
    text = """
        use crate::plan::{Plan, Step};
        use crate::{records, outcome::EngineError};
        // use crate::driver::engine;  (a comment names nothing)
        fn f() { let _ = crate::workload::keys::capacity(8); }
    """
    assert imports(text) == {"plan", "records", "outcome", "workload"}
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "mod.rs").write_text("use crate::workload::Mix;\n")
    (tmp_path / "workload.rs").write_text("use crate::plan::Plan;\n")
    (tmp_path / "lib.rs").write_text("mod plan;\nuse crate::plan::Plan;\n")
    edges = graph(tmp_path)
    assert edges == {"lib": {"plan"}, "plan": {"workload"}, "workload": {"plan"}}
    assert find_cycle(edges) == ["plan", "workload", "plan"]


def test_the_engine_modules_import_one_way() -> None:
    edges = graph(SOURCE)
    assert {"lib", "plan", "driver", "protocols", "workload"} <= set(edges)
    cycle = find_cycle(edges)
    assert cycle is None, "engine modules import in a cycle: " + " -> ".join(cycle or [])


def test_the_plan_is_data_at_the_bottom() -> None:
    edges = graph(SOURCE)
    assert edges["plan"] == set(), f"plan imports {sorted(edges['plan'])}"
    assert not any("lib" in named for named in edges.values())
