"""What compactions did to a ``type: kubernetes`` load: the latency of the
requests in flight while one ran against the rest's. Pure.

A compaction spans its Compact request's send to its reply, which etcd
sends once it has removed the old revisions (the engine asks it to wait:
``physical``). A request is *during* a compaction when the two overlap at
all, from its due time (its send, in a closed loop) to its reply: a request
a compaction held up is then counted even if it began just before. Only
successful requests count, as in the latency rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dbtester.results import CompactionRecord, Records
from dbtester.workloads.kubernetes import COMPACTION_ROWS

__all__ = ["compaction_values", "in_windows", "overlapping"]


def overlapping(
    windows: Sequence[tuple[float, float]],
    begin_s: npt.NDArray[np.float64],
    end_s: npt.NDArray[np.float64],
) -> npt.NDArray[np.bool_]:
    """Which of the spans ``begin_s``..``end_s`` overlap one of ``windows``
    (start, end; unix seconds; in any order, overlapping or not)."""
    ordered = sorted(windows)
    starts = np.array([start for start, _ in ordered], dtype=np.float64)
    ends = np.maximum.accumulate(np.array([end for _, end in ordered], dtype=np.float64))
    if not len(starts):
        return np.zeros(len(begin_s), dtype=bool)
    # the first window that ends at or after the span begins (ends running
    # as their maximum so far); the span overlaps one when that window, or
    # one before it still open, starts before the span ends
    first = np.searchsorted(ends, begin_s, side="left")
    found = first < len(ends)
    starts_at = starts[np.minimum(first, len(starts) - 1)]
    return found & (starts_at <= end_s)


def in_windows(
    windows: Sequence[tuple[float, float]], records: Records
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The successful requests' latency (ms), and which of them were in
    flight (due time to reply) in one of ``windows`` (unix seconds)."""
    ok = records.code == 0
    begin_s = records.due_ns[ok] / 1e9
    latency_ms = records.latency_ns[ok] / 1e6
    return latency_ms, overlapping(windows, begin_s, begin_s + latency_ms / 1e3)


def compaction_values(
    compactions: Sequence[CompactionRecord], records: Records
) -> dict[str, float]:
    """COMPACTION_ROWS' values: the longest compaction (s), and p99 and max
    latency (ms) of the successful requests during compactions and outside
    them (a side with no request has no value)."""
    if not compactions:
        return {}
    longest, p99_in, p99_out, max_in, max_out = COMPACTION_ROWS
    values = {longest: max(c.ended_unix - c.started_unix for c in compactions)}
    latency_ms, inside = in_windows([(c.started_unix, c.ended_unix) for c in compactions], records)
    for mask, p99_row, max_row in ((inside, p99_in, max_in), (~inside, p99_out, max_out)):
        if mask.any():
            values[p99_row] = float(np.percentile(latency_ms[mask], 99))
            values[max_row] = float(latency_ms[mask].max())
    return values
