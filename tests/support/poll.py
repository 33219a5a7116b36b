"""Waiting on a condition rather than sleeping a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll_until"]

T = TypeVar("T")


def poll_until(
    condition: Callable[[], T],
    timeout_s: float,
    interval_s: float = 0.05,
    message: str | Callable[[], str] = "condition not met",
) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something
    truthy, and return that; AssertionError naming ``message`` and the last
    value after ``timeout_s``. The condition is called once more at the
    deadline, so a slow machine gets the whole timeout. ``message`` may be a
    callable, for text that is only worth building on failure."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"{said} (after {timeout_s:g} s; last value: {value!r})")
        time.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))
