"""Durations as test cases write them: ``500ms``, ``1.5s``, ``2m``, ``1h`` or
a number of seconds."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)\s*$")


def parse_duration(value: object) -> object:
    """``10s`` / ``1.5s`` / ``500ms`` / ``2m`` / ``1h`` -> seconds; numbers pass
    (they are seconds); anything else is left for the model to refuse."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f"{value!r} is not a duration: write seconds (10, 1.5) or 10s, 500ms, 2m, 1h"
            )
        return float(match.group(1)) * _UNITS[match.group(2)]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
