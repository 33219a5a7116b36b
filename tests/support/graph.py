"""Import graphs: one cycle finder for the Python layer test and the
engine's module test."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["find_cycle"]


def find_cycle(edges: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle in ``edges`` as a path that returns to its start
    ([a, b, ..., a]), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None
