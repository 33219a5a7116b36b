"""What events expiring did to a ``type: kubernetes`` load: the latency of
the requests in flight in a second in which events expired against the
rest's. Pure.

The engine's watcher counts expirations per second of arrival (the events'
deletes reach it within milliseconds of etcd revoking their lease), so a
storm is placed to the second: a request is *during* one when its due
time to its reply overlaps such a second at all. Only successful requests
count, as in the latency rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dbtester.analyze.compactions import in_windows
from dbtester.results import Records
from dbtester.workloads.kubernetes import EXPIRATION_ROWS

__all__ = ["expiration_values"]


def expiration_values(
    expirations: Sequence[tuple[float, int]], records: Records
) -> dict[str, float]:
    """EXPIRATION_ROWS' values: p99 latency (ms) of the successful requests in
    flight in a second with expirations, and of the others (a side with no
    request has no value)."""
    if not expirations:
        return {}
    windows = [(start, start + 1.0) for start, count in expirations if count]
    latency_ms, inside = in_windows(windows, records)
    values = {}
    for mask, row in zip((inside, ~inside), EXPIRATION_ROWS, strict=True):
        if mask.any():
            values[row] = float(np.percentile(latency_ms[mask], 99))
    return values
