"""Cumulative counters (bytes sent, context switches, disk sectors) turned into
per-interval deltas that are never negative."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Counters"]


class Counters:
    """Turns cumulative counters into never-negative deltas, per key."""

    def __init__(self) -> None:
        self._last: dict[object, int] = {}

    def delta(self, key: object, value: int) -> int:
        previous = self._last.get(key)
        self._last[key] = value
        if previous is None:
            return 0  # first sight: a baseline, not a change
        if value < previous:
            return value  # reset or wrap: the counter started again from zero
        return value - previous

    def delta_new_from_zero(self, key: object, value: int) -> int:
        """Like delta, but a key first seen counts in full (a thread that appeared
        since the last tick did all its switching within that tick)."""
        if key not in self._last:
            self._last[key] = 0
        return self.delta(key, value)

    def forget_except(self, keys: Iterable[object]) -> None:
        keep = set(keys)
        self._last = {k: v for k, v in self._last.items() if k in keep}
