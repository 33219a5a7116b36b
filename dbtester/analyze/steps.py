"""Client-scaling runs (``client_steps``): each step's throughput, p50, p99 and
server CPU, as table rows (``CLIENTS-<n>-<row>``) and as series against the
client count, one point per step. Pure.

Each figure is defined as the whole run's row of the same name, over the
requests of one step: AVG-THROUGHPUT from the step's first due time to its
last completion, the percentiles over its answered requests, and
SERVER-MAX-CPU-USAGE the highest one-second sample of any member that
overlaps the step (a sample covers the second before it, so a step shorter
than a second shares its sample with the step next to it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.analyze.data import DatabaseData
from dbtester.analyze.figures import STEP_ROWS, Figures, Series, step_row
from dbtester.results import DatabaseRecord, Records

__all__ = ["SCALING_SERIES", "add_steps", "client_steps"]

#: per-step row -> the chart series that draws it against the client count
SCALING_SERIES = {
    "AVG-THROUGHPUT": "AVG-THROUGHPUT-BY-CLIENTS",
    "Latency p50": "LATENCY-P50-MS-BY-CLIENTS",
    "Latency p99": "LATENCY-P99-MS-BY-CLIENTS",
    "SERVER-MAX-CPU-USAGE": "SERVER-MAX-CPU-BY-CLIENTS",
}


def client_steps(record: DatabaseRecord) -> tuple[int, ...]:
    """The client count of each step the database ran, from the workload it
    ran with (its record keeps the test case's entry); () without steps, and
    for a record that does not say (older results directories)."""
    workload: Any = record.database.get("workload")
    steps: Any = workload.get("client_steps") if isinstance(workload, dict) else None
    if not isinstance(steps, list | tuple):
        return ()
    if not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in steps):
        return ()
    return tuple(steps)


def add_steps(data: DatabaseData, figures: Figures) -> None:
    """Add the per-step rows and the scaling series to ``figures``: only for a
    database that ran two or more client steps (one step is the whole run)."""
    steps = client_steps(data.record)
    records = data.records
    if len(steps) < 2 or records is None or len(records) == 0:
        return
    points: dict[str, list[tuple[int, float]]] = {row: [] for row in STEP_ROWS}
    for index, clients in enumerate(steps):
        for row, value in _step_values(data, records, records.step == index).items():
            figures.values[step_row(clients, row)] = value
            points[row].append((clients, value))
    for row, found in points.items():
        if found:
            x, y = zip(*found, strict=True)
            series = Series(np.array(x, dtype=float), np.array(y, dtype=float))
            figures.series[SCALING_SERIES[row]] = series


def _step_values(
    data: DatabaseData, records: Records, mask: npt.NDArray[np.bool_]
) -> dict[str, float]:
    if not mask.any():
        return {}
    step = records.subset(mask)
    # the one definition of throughput (Records.throughput), over this step
    values = {"AVG-THROUGHPUT": step.throughput(data.load_start)}
    latency_ms = step.latency_ns[step.code == 0] / 1e6
    if len(latency_ms):
        p50, p99 = np.percentile(latency_ms, (50, 99))
        values["Latency p50"], values["Latency p99"] = float(p50), float(p99)
    begin = step.due_ns.min() / 1e9 - data.load_start
    end = (step.due_ns + step.latency_ns).max() / 1e9 - data.load_start
    cpu = _server_cpu(data, float(begin), float(end))
    if cpu is not None:
        values["SERVER-MAX-CPU-USAGE"] = cpu
    return values


def _server_cpu(data: DatabaseData, begin: float, end: float) -> float | None:
    """The highest sample of any member whose second overlaps [begin, end]."""
    highest = None
    for frame in data.servers:
        during = frame[(frame["t"] > begin) & (frame["t"] <= end + 1.0)]
        if len(during):
            top = float(during["cpu_percent"].max())
            highest = top if highest is None else max(highest, top)
    return highest
