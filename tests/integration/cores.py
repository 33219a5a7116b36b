"""One core crowded with busy loops, for the tests that starve a load engine
of CPU (as on a client machine that runs something else too), and the other
cores for what must not starve with it: the server, the controller.

Affinity is per thread and inherited by the threads and processes a thread
starts, so what runs inside :func:`pinned` and what it starts stays there.
These tests are marked ``solo``: another test's load on the other cores
would starve the server too, and then neither side is clearly the limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

__all__ = ["busy_loops", "pinned", "split_cores"]


def split_cores() -> tuple[set[int], set[int]]:
    """(the core to crowd, every other core of this process's); the test is
    skipped with fewer than two."""
    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        pytest.skip("needs two cores: one crowded for the engine, one for the rest")
    crowded = {min(cores)}
    return crowded, cores - crowded


@contextmanager
def pinned(cores: set[int]) -> Iterator[None]:
    """This thread on ``cores``, and whatever it starts inside."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextmanager
def busy_loops(cores: set[int], count: int) -> Iterator[None]:
    """``count`` processes spinning on ``cores``, stopped by PID at the end.
    Each in a session of its own: where the kernel schedules sessions as
    groups (autogroup), each loop then weighs as much as any other session,
    as it would without groups."""
    argv = [sys.executable, "-c", "while True: pass"]
    loops = [subprocess.Popen(argv, start_new_session=True) for _ in range(count)]
    try:
        for loop in loops:
            os.sched_setaffinity(loop.pid, cores)
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
