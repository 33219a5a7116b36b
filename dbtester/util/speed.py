"""How fast this machine's CPU is right now, measured the same way on every
host once a second: the host-speed probe.

On a shared virtual machine a core's speed changes by several percent from one
second to the next, with no steal time to show for it, and a benchmark whose
members and client saturate the cores runs that much faster or slower. The
probe makes that visible beside the figures: a fixed piece of pure-Python
arithmetic (~0.8 ms here), timed in the sampling thread's own CPU time, so that
waiting for a core (a busy machine) does not count and only how much work a
core does per CPU-second (its speed) does. The fastest of three runs is kept:
an interrupt inside one run inflates only that one.

Its cost, measured by ``python benchmarks/host_speed_probe.py``: see the
docs' Trials page. Steal time (``/proc/stat``) is read beside it: time the
hypervisor gave this machine's virtual CPUs to someone else.
"""

from __future__ import annotations

import time

import psutil

__all__ = ["PROBE_ROUNDS", "PROBE_WORK", "probe_ns", "steal_ms"]

#: iterations of the probe's loop: about 0.8 ms of CPU on this project's 2-core test machines
PROBE_WORK = 20_000
#: runs per sample; the fastest counts
PROBE_ROUNDS = 3


def _piece(work: int) -> int:
    total = 0
    for i in range(work):
        total += i * i
    return total


def probe_ns(work: int = PROBE_WORK, rounds: int = PROBE_ROUNDS) -> int:
    """CPU nanoseconds the fastest of ``rounds`` runs of the fixed piece took
    in this thread: higher means a slower CPU at this moment."""
    best = 0
    for _ in range(rounds):
        start = time.thread_time_ns()
        _piece(work)
        took = time.thread_time_ns() - start
        best = took if best == 0 else min(best, took)
    return max(best, 1)


def steal_ms() -> int:
    """Steal time of all CPUs since boot, in milliseconds (0 where the kernel
    does not count it)."""
    return int(getattr(psutil.cpu_times(), "steal", 0.0) * 1000)
