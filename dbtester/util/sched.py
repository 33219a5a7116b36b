"""How long this process's threads ran and how long they waited for a CPU,
from Linux's per-thread scheduler statistics (``/proc/self/task/*/schedstat``:
nanoseconds on a CPU, nanoseconds runnable but waiting in a run queue).

A load generator that is short of CPU falls behind its schedule without
being busy itself: the time its threads waited to run says so when their CPU
time does not (an engine sharing its core with other work got little CPU
and waited the rest).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SchedMeter"]

_TASKS = Path("/proc/self/task")


class SchedMeter:
    """The run and wait time of this process's threads whose names start
    with ``prefix`` (all of them: "") between the first :meth:`sample` and
    the last. Threads already there at the first sample count from it;
    threads started later count from their start; a thread that ends
    between two samples loses what it did since the earlier one, so sample
    often (the load's poll, four times a second)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._names: dict[str, bool] = {}  # task -> whether it is counted
        self._last: dict[str, tuple[int, int]] = {}
        self._started = False
        self.run_ns = 0
        self.wait_ns = 0
        #: False where the kernel keeps no such statistics
        self.available = Path("/proc/self/schedstat").is_file()

    def sample(self) -> None:
        if not self.available:
            return
        try:
            tasks = os.listdir(_TASKS)
        except OSError:
            self.available = False
            return
        current: dict[str, tuple[int, int]] = {}
        for task in tasks:
            if not self._counted(task):
                continue
            found = _read(task)
            if found is None:
                continue
            current[task] = found
            # a thread seen first after the first sample started since: from 0
            run, wait = self._last.get(task, (0, 0) if self._started else found)
            self.run_ns += max(0, found[0] - run)
            self.wait_ns += max(0, found[1] - wait)
        self._last = current
        self._started = True

    def _counted(self, task: str) -> bool:
        if task not in self._names:
            try:
                name = (_TASKS / task / "comm").read_text().strip()
            except OSError:
                return False  # gone already
            self._names[task] = name.startswith(self.prefix)
        return self._names[task]

    @property
    def run_seconds(self) -> float | None:
        return self.run_ns / 1e9 if self.available else None

    @property
    def wait_seconds(self) -> float | None:
        return self.wait_ns / 1e9 if self.available else None


def _read(task: str) -> tuple[int, int] | None:
    try:
        fields = (_TASKS / task / "schedstat").read_text().split()
        return int(fields[0]), int(fields[1])
    except FileNotFoundError:
        return None  # the thread ended
    except (OSError, ValueError, IndexError):
        return None
