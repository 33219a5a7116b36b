"""What a lock load's acquisitions show (``type: lock``): whether each lock
was held by one locker at a time with rising fencing tokens, and how it was
handed over. A locker whose release did not reach the database (a member
lost) may take its own key again with the same token: its hold went on.

A holder holds, on the engine's one clock, from the arrival of its
acquire's reply to the start of its release. The database's own hold is
longer at both ends (it granted the lock before its reply arrived, and
freed it after the release was sent), so in a correct run each holder's
acquisition comes after the previous holder's release began: an overlap of
the engine's spans is an overlap of the database's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dbtester.results import FigureValue, LockHolds

__all__ = [
    "LockProblem",
    "acquisitions_by_locker",
    "handover_per_second",
    "handovers",
    "lock_problems",
    "lock_values",
]


@dataclass(frozen=True)
class LockProblem:
    """The first thing wrong with one lock."""

    lock: int
    reason: str


def lock_problems(holds: LockHolds) -> list[LockProblem]:
    """Each lock's first overlap of two holders, or fencing token that did
    not rise from one holder to the next, in lock order."""
    found = []
    start = int(holds.acquired_ns.min()) if len(holds) else 0
    for number in holds.locks():
        mine = holds.of_lock(number)
        for i in range(1, len(mine)):
            reason = _wrong(mine, i - 1, i, start)
            if reason:
                found.append(LockProblem(number, reason))
                break
    return found


def _wrong(holds: LockHolds, a: int, b: int, start: int) -> str:
    """What is wrong between holder ``a`` and the next one, ``b`` (times in
    seconds from ``start``, the load's first acquisition)."""

    def at(ns: int) -> str:
        return f"{(ns - start) / 1e9:+.6f} s"

    first, then = int(holds.locker[a]), int(holds.locker[b])
    released = int(holds.released_ns[a])
    acquired = int(holds.acquired_ns[b])
    if released == 0 or acquired < released:
        until = "without releasing it" if released == 0 else f"until {at(released)}"
        return (
            f"locker {then} acquired it at {at(acquired)} while locker {first} held it (from"
            f" {at(int(holds.acquired_ns[a]))} {until})"
        )
    # The same locker with the same token took its own key or node again:
    # its release never reached the database (a token names one creation),
    # so this is its hold going on, not a second holder.
    again = first == then and holds.token[b] == holds.token[a]
    if holds.token[b] <= holds.token[a] and not again:
        return (
            f"locker {then}'s fencing token {int(holds.token[b])} (acquired at {at(acquired)})"
            f" is not above locker {first}'s {int(holds.token[a])}"
        )
    return ""


def lock_values(
    holds: LockHolds, counters: Mapping[str, int], ttl_s: float
) -> dict[str, FigureValue]:
    """The rows of a lock load: acquisitions; the handover, from a holder's
    release to the acquisition of a locker that was already waiting
    (p50, p99, max in ms; none without such a pair); WAIT-FAIRNESS, the
    longest wait for a lock against the mean (1: all waited alike); the
    sessions opened, their TTL, and the releases that failed."""
    values: dict[str, FigureValue] = {
        "LOCKS-ACQUIRED": len(holds),
        "LOCK-SESSIONS": counters.get("lock_sessions", 0),
        "SESSION-TTL-SECONDS": ttl_s,
        "FAILED-RELEASES": counters.get("failed_releases", 0),
    }
    _, handover_ms = handovers(holds)
    if len(handover_ms):
        p50, p99 = np.percentile(handover_ms, (50, 99))
        values |= {
            "HANDOVER-P50-MS": float(p50),
            "HANDOVER-P99-MS": float(p99),
            "HANDOVER-MAX-MS": float(handover_ms.max()),
        }
    waits = (holds.acquired_ns - holds.asked_ns).astype(np.float64)
    if len(waits) and waits.mean() > 0:
        values["WAIT-FAIRNESS"] = float(waits.max() / waits.mean())
    return values


def handovers(holds: LockHolds) -> tuple[np.ndarray, np.ndarray]:
    """When each handover ended (the acquisition, unix ns) and how long it
    took (ms): for each holder whose acquire was sent before the previous
    holder of its lock began its release, from that release to its
    acquisition. A holder that crashed released nothing: what came after it
    is the session's expiry (the fault rows), not a handover."""
    ends: list[np.ndarray] = []
    found: list[np.ndarray] = []
    for number in holds.locks():
        mine = holds.of_lock(number)
        released, asked, acquired = mine.released_ns[:-1], mine.asked_ns[1:], mine.acquired_ns[1:]
        waiting = (released > 0) & (asked < released) & ~mine.crashed[:-1]
        ends.append(acquired[waiting])
        found.append((acquired - released)[waiting] / 1e6)
    if not found:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return np.concatenate(ends), np.concatenate(found).astype(np.float64)


def handover_per_second(holds: LockHolds, load_start: float) -> tuple[np.ndarray, np.ndarray]:
    """Each second since ``load_start`` in which handovers ended, and their
    median (ms), for the chart."""
    ends, ms = handovers(holds)
    if not len(ms):
        return np.zeros(0), np.zeros(0)
    seconds = np.floor(np.maximum(ends / 1e9 - load_start, 0)).astype(np.int64)
    found = np.unique(seconds)
    medians = [float(np.median(ms[seconds == second])) for second in found]
    return found.astype(np.float64), np.array(medians)


def acquisitions_by_locker(holds: LockHolds) -> tuple[np.ndarray, np.ndarray]:
    """Each locker that acquired and how many times, for the chart: a fair
    lock's lockers take about as many each."""
    lockers, counts = np.unique(holds.locker, return_counts=True)
    return lockers.astype(np.float64), counts.astype(np.float64)
