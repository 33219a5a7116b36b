"""The latency heatmap: how many requests fell in each latency bucket in each
stretch of the load. A percentile line over time hides what the heatmap
shows: two modes (a fast path and a slow one), a stall (a column with
nothing low), a queue that builds (mass moving up).

Every request counts, failed ones too (a timeout is a latency a client
waited), at its due time on the x axis, as the latency charts place it.
Buckets are fixed (ten a decade), so two databases' maps line up row for
row; the time axis has at most :data:`MAX_COLUMNS` columns of a round width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dbtester.results import Records

__all__ = ["BUCKETS_PER_DECADE", "MAX_COLUMNS", "WIDTHS_S", "Heatmap", "latency_heatmap"]

#: latency buckets: ten a decade (each edge 1.26x the one below)
BUCKETS_PER_DECADE = 10
#: the lowest and highest edges, as powers of ten of milliseconds (10 µs to
#: 100 s): anything outside falls in the first or last bucket
LOWEST_DECADE, HIGHEST_DECADE = -2, 5
#: the time axis is cut into at most this many columns
MAX_COLUMNS = 240
#: the column widths to choose from (seconds): round ones a reader can count
WIDTHS_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


@dataclass(frozen=True)
class Heatmap:
    """``counts[row, column]``: requests whose latency fell between
    ``edges_ms[row]`` and ``edges_ms[row + 1]`` and that were due in column
    ``column``, which starts ``column * width_s`` seconds after the load's
    start. Rows with no request at the bottom and top are left out."""

    width_s: float
    edges_ms: npt.NDArray[np.float64]
    counts: npt.NDArray[np.int64]
    #: the trial it is of (1 with a single run)
    trial: int = 1

    @property
    def columns(self) -> int:
        return int(self.counts.shape[1])

    @property
    def starts_s(self) -> npt.NDArray[np.float64]:
        """Each column's start, in seconds since the load started."""
        return np.arange(self.columns, dtype=np.float64) * self.width_s


def _all_edges_ms() -> npt.NDArray[np.float64]:
    rows = (HIGHEST_DECADE - LOWEST_DECADE) * BUCKETS_PER_DECADE
    exponents = LOWEST_DECADE + np.arange(rows + 1) / BUCKETS_PER_DECADE
    edges: npt.NDArray[np.float64] = 10.0**exponents
    return edges


def column_width(span_s: float) -> float:
    """The narrowest round width that cuts ``span_s`` into at most
    :data:`MAX_COLUMNS` columns (the widest one beyond that)."""
    for width in WIDTHS_S:
        if span_s / width <= MAX_COLUMNS:
            return width
    return WIDTHS_S[-1]


def _buckets(latency_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """Each latency's bucket, from 0 (below the lowest edge too). In single
    precision, five times faster than double for 3M requests: a latency
    within 0.003% of an edge may land on either side of it."""
    position = latency_ns.astype(np.float32)
    np.maximum(position, np.float32(10.0 ** (LOWEST_DECADE + 6)), out=position)
    np.log10(position, out=position)
    position -= np.float32(LOWEST_DECADE + 6)  # ns to ms: 6 decades
    position *= np.float32(BUCKETS_PER_DECADE)
    buckets: npt.NDArray[np.int32] = position.astype(np.int32)  # >= 0: truncation floors
    return buckets


def latency_heatmap(records: Records, load_start: float, trial: int = 1) -> Heatmap | None:
    """The heatmap of every request in ``records`` (None without any)."""
    if len(records) == 0:
        return None
    due_s = records.due_ns / 1e9 - load_start
    # a request due before the recorded start (a load host's clock) is in
    # the first column
    due_s = np.maximum(due_s, 0.0)
    last_s = float(due_s.max())
    width = column_width(last_s)
    columns = math.floor(last_s / width) + 1
    column = np.minimum((due_s / width).astype(np.int64), columns - 1)
    edges = _all_edges_ms()
    rows = len(edges) - 1
    row = np.clip(_buckets(records.latency_ns), 0, rows - 1)
    counts = np.bincount(row * columns + column, minlength=rows * columns)
    grid = counts.reshape(rows, columns).astype(np.int64)
    used = np.flatnonzero(grid.sum(axis=1))
    low, high = int(used[0]), int(used[-1])
    return Heatmap(width, edges[low : high + 2].copy(), grid[low : high + 1].copy(), trial)
