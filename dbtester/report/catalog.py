"""The charts there are: each one's file name (as the original's), title
and axes, and which a run draws. Nothing here draws: the table-only
rendering (``--no-charts``) reads this without loading matplotlib."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dbtester.analyze.figures import (
    ACQUISITIONS_BY_LOCKER,
    DB_SIZE_SERIES,
    EXPIRATION_SERIES,
    HANDOVER_SERIES,
    INFORMER_BY_INFORMER,
    SEARCH_CURVE,
    SEARCH_TARGET,
    WATCH_BY_WATCHER,
    WATCH_SERIES,
    Figures,
    operation_series,
)
from dbtester.analyze.steps import SCALING_SERIES
from dbtester.results import OPERATIONS

__all__ = ["CHARTS", "CLIENTS", "HEATMAP", "KEYS", "SECONDS", "STANDARD", "Chart", "drawn"]

SECONDS = "Seconds since the load started"
KEYS = "Keys written"
CLIENTS = "Clients"


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    x_label: str
    y_label: str
    error_points: bool = False
    #: drawn only when some database has its series (repeated runs' charts)
    optional: bool = False
    markers: bool = False
    #: a logarithmic x axis, ticked at the x values drawn (client counts: 1 to 1,000)
    log_x: bool = False
    #: a series drawn once, dashed, from the first database that has it (a target)
    reference: str | None = None
    reference_label: str = ""
    #: not lines but each database's latency heatmap (Figures.heatmap)
    heatmap: bool = False

    @property
    def over_time(self) -> bool:
        """Its x axis is seconds since the load started (fault windows are shaded)."""
        return self.x_label == SECONDS


def _scaling(row: str, title: str, y_label: str) -> Chart:
    """A client-scaling chart: ``row`` of each client step against its clients."""
    return Chart(
        SCALING_SERIES[row], title, CLIENTS, y_label, optional=True, markers=True, log_x=True
    )


#: every request by its latency and when it was due, a panel per database
HEATMAP = Chart(
    "LATENCY-HEATMAP",
    "Latency heatmap (requests by latency and time)",
    SECONDS,
    "Latency (ms)",
    optional=True,
    heatmap=True,
)

CHARTS = (
    Chart("AVG-LATENCY-MS", "Average latency", SECONDS, "Latency (ms)"),
    HEATMAP,
    # mixed workloads: each operation's latency on its own chart
    *(
        Chart(
            operation_series(op),
            f"Average latency of {op}s",
            SECONDS,
            "Latency (ms)",
            optional=True,
        )
        for op in OPERATIONS
    ),
    Chart(
        WATCH_SERIES,
        "Average watch event latency (put sent to event received)",
        SECONDS,
        "Latency (ms)",
        optional=True,
    ),
    Chart(
        WATCH_BY_WATCHER,
        "Watch event latency p99 by watcher",
        "Watcher",
        "Latency p99 (ms)",
        optional=True,
        markers=True,
    ),
    Chart(
        EXPIRATION_SERIES,
        "Event leases' expirations (a watcher of the events' deletes)",
        SECONDS,
        "Expired events per second",
        optional=True,
    ),
    Chart(
        INFORMER_BY_INFORMER,
        "Informer event lag p99 by informer (put sent to event received)",
        "Informer",
        "Lag p99 (ms)",
        optional=True,
        markers=True,
    ),
    Chart(
        HANDOVER_SERIES,
        "Lock handover (a holder's release to the next holder's acquire), each second's median",
        SECONDS,
        "Handover (ms)",
        optional=True,
    ),
    Chart(
        ACQUISITIONS_BY_LOCKER,
        "Acquisitions by locker (a fair lock's lockers take about as many each)",
        "Locker",
        "Acquisitions",
        optional=True,
        markers=True,
    ),
    Chart("AVG-LATENCY-MS-BY-KEY", "Average latency by keys written", KEYS, "Latency (ms)"),
    Chart(
        "AVG-LATENCY-MS-BY-KEY-ERROR-POINTS",
        "Latency by keys written (min-max)",
        KEYS,
        "Latency (ms)",
        error_points=True,
    ),
    Chart("AVG-THROUGHPUT", "Throughput", SECONDS, "Requests per second"),
    Chart(
        "AVG-VOLUNTARY-CTXT-SWITCHES",
        "Voluntary context switches (avg per member)",
        SECONDS,
        "Switches per second",
    ),
    Chart(
        "AVG-NON-VOLUNTARY-CTXT-SWITCHES",
        "Non-voluntary context switches (avg per member)",
        SECONDS,
        "Switches per second",
    ),
    Chart("AVG-CPU", "Server CPU (avg per member)", SECONDS, "CPU (%; 100 = one core)"),
    Chart("MAX-CPU", "Server CPU (busiest member)", SECONDS, "CPU (%; 100 = one core)"),
    Chart("AVG-VMRSS-MB", "Server memory (avg per member)", SECONDS, "Resident memory (MB)"),
    Chart("AVG-VMRSS-MB-BY-KEY", "Server memory by keys written", KEYS, "Resident memory (MB)"),
    Chart(
        "AVG-VMRSS-MB-BY-KEY-ERROR-POINTS",
        "Server memory by keys written (min-max)",
        KEYS,
        "Resident memory (MB)",
        error_points=True,
    ),
    Chart(
        DB_SIZE_SERIES[0],
        "Database size (avg per member; etcd's dbSize)",
        SECONDS,
        "Database file (MB)",
        optional=True,
    ),
    Chart(
        DB_SIZE_SERIES[1],
        "Database size in use (avg per member; etcd's dbSizeInUse)",
        SECONDS,
        "Live data in the file (MB)",
        optional=True,
    ),
    Chart(
        "HOST-SPEED",
        "Host speed (the client machine's CPU, by the host-speed probe)",
        SECONDS,
        "Probe runs per CPU-second",
        optional=True,
    ),
    Chart(
        "THROUGHPUT-BY-TRIAL",
        "Throughput of each trial",
        "Trial",
        "Requests per second",
        optional=True,
        markers=True,
    ),
    Chart(
        SEARCH_CURVE,
        "Latency by offered rate (the search's probes)",
        "Offered rate (requests per second)",
        "Latency at the search's percentile (ms)",
        optional=True,
        markers=True,
        reference=SEARCH_TARGET,
        reference_label="latency target",
    ),
    _scaling("AVG-THROUGHPUT", "Throughput by clients", "Requests per second"),
    _scaling("Latency p50", "Latency p50 by clients", "Latency (ms)"),
    _scaling("Latency p99", "Latency p99 by clients", "Latency (ms)"),
    _scaling(
        "SERVER-MAX-CPU-USAGE", "Server CPU by clients (busiest member)", "CPU (%; 100 = one core)"
    ),
    Chart("AVG-READS-COMPLETED-DELTA", "Disk reads completed", SECONDS, "Reads per second"),
    Chart("AVG-SECTORS-READ-DELTA", "Disk sectors read", SECONDS, "Sectors per second"),
    Chart("AVG-WRITES-COMPLETED-DELTA", "Disk writes completed", SECONDS, "Writes per second"),
    Chart("AVG-SECTORS-WRITTEN-DELTA", "Disk sectors written", SECONDS, "Sectors per second"),
    Chart(
        "AVG-READ-BYTES-NUM-DELTA",
        "Bytes read by the database process",
        SECONDS,
        "Bytes per second",
    ),
    Chart(
        "AVG-WRITE-BYTES-NUM-DELTA",
        "Bytes written by the database process",
        SECONDS,
        "Bytes per second",
    ),
    Chart(
        "AVG-RECEIVE-BYTES-NUM-DELTA",
        "Network bytes received (avg per member)",
        SECONDS,
        "Bytes per second",
    ),
    Chart(
        "AVG-TRANSMIT-BYTES-NUM-DELTA",
        "Network bytes transmitted (avg per member)",
        SECONDS,
        "Bytes per second",
    ),
)


#: the charts every run has
STANDARD = tuple(c for c in CHARTS if not c.optional)


def drawn(figures: Sequence[Figures]) -> list[Chart]:
    """The charts for these databases: every one, and the optional ones with data."""
    return [c for c in CHARTS if not c.optional or any(_has(c, f) for f in figures)]


def _has(chart: Chart, figures: Figures) -> bool:
    return figures.heatmap is not None if chart.heatmap else chart.name in figures.series
