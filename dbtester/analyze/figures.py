"""From raw data to numbers: the table's rows and the charts' series.

Latency percentiles are exact (numpy over every request). Throughput is
counted per whole second of completions. Server figures use only samples
inside the load window, on the controller's clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from dbtester.analyze.compactions import compaction_values
from dbtester.analyze.correctness import describe as describe_correctness
from dbtester.analyze.data import DatabaseData
from dbtester.analyze.expirations import expiration_values
from dbtester.analyze.faults import (
    FAULT_ROWS,
    fault_figures,
    fault_row,
    fault_values,
    lock_fault_figures,
    watch_fault_figures,
)
from dbtester.analyze.heatmap import Heatmap, latency_heatmap
from dbtester.analyze.informers import informer_values, p99_by_informer
from dbtester.analyze.locks import acquisitions_by_locker, handover_per_second, lock_values
from dbtester.analyze.stats import SEARCH_METRICS
from dbtester.results import (
    NOT_ERRORS,
    OPERATIONS,
    STORAGE_COLUMNS,
    FaultSummary,
    LockHolds,
    Records,
    WatchEvents,
)
from dbtester.workloads import TYPES
from dbtester.workloads.kubernetes import (
    COMPACTION_ROWS,
    COUNTER_ROWS,
    EVENT_ROWS,
    EXPIRATION_ROWS,
    INFORMER_ROWS,
    LIST_RATE_ROWS,
)
from dbtester.workloads.lock import LOCK_ROWS, LockWorkload
from dbtester.workloads.mixed import CONFLICT_ROW, OPERATION_ROWS, STALE_ROW
from dbtester.workloads.watch import WATCH_PERCENTILES, WatchWorkload

__all__ = [
    "ACQUISITIONS_BY_LOCKER",
    "CHECK_ROWS",
    "COMPACTION_ROWS",
    "CONFLICT_ROW",
    "COUNTER_ROWS",
    "CV_ROW",
    "DB_SIZE_ROWS",
    "DB_SIZE_SERIES",
    "EVENT_ROWS",
    "EXPIRATION_ROWS",
    "EXPIRATION_SERIES",
    "HANDOVER_SERIES",
    "HOST_ROWS",
    "INFORMER_BY_INFORMER",
    "INFORMER_ROWS",
    "LIST_RATE_ROWS",
    "OPERATION_ROWS",
    "PERCENTILES",
    "ROWS",
    "ROW_GROUPS",
    "SEARCH_CURVE",
    "SEARCH_ROWS",
    "SEARCH_TARGET",
    "STALE_READ",
    "STALE_ROW",
    "STEP_ROWS",
    "TREND_ROW",
    "WATCH_BY_WATCHER",
    "WATCH_ROWS",
    "WATCH_SERIES",
    "Figures",
    "Series",
    "Window",
    "compute",
    "grouped_rows",
    "offered_rate",
    "operation_row",
    "operation_series",
    "row_group",
    "served_rate",
    "step_row",
    "table_rows",
    "unoperated",
    "unserved",
    "unstepped",
]

PERCENTILES = (10, 25, 50, 75, 90, 95, 99, 99.9, 99.99)

# The table, in order: the original's rows, then dbtester's additions.
ROWS = (
    "TOTAL-SECONDS",
    "TOTAL-REQUEST-NUMBER",
    "MAX-THROUGHPUT",
    "AVG-THROUGHPUT",
    "MIN-THROUGHPUT",
    "FASTEST-LATENCY",
    "AVG-LATENCY",
    "SLOWEST-LATENCY",
    "Latency p10",
    "Latency p25",
    "Latency p50",
    "Latency p75",
    "Latency p90",
    "Latency p95",
    "Latency p99",
    "Latency p99.9",
    "SERVER-TOTAL-NETWORK-RX-DATA-SUM",
    "SERVER-TOTAL-NETWORK-TX-DATA-SUM",
    "CLIENT-TOTAL-NETWORK-RX-SUM",
    "CLIENT-TOTAL-NETWORK-TX-SUM",
    "SERVER-MAX-CPU-USAGE",
    "SERVER-MAX-MEMORY-USAGE",
    "CLIENT-MAX-CPU-USAGE",
    "CLIENT-MAX-MEMORY-USAGE",
    "CLIENT-ERROR-COUNT",
    "SERVER-AVG-READS-COMPLETED-DELTA-SUM",
    "SERVER-AVG-SECTORS-READS-DELTA-SUM",
    "SERVER-AVG-WRITES-COMPLETED-DELTA-SUM",
    "SERVER-AVG-SECTORS-WRITTEN-DELTA-SUM",
    "SERVER-AVG-DISK-SPACE-USAGE",
    "Latency p99.99",
    "KEYS-VERIFIED",
    "CLIENT-CPU-SECONDS-PER-10K-REQUESTS",
)


#: open loop: how late the engine sent the requests a free client took at
#: their due time (due time to the start of sending), in ms; a request that
#: waited for a busy client is the open loop's queue and is counted apart
SCHEDULE_ROWS = ("SCHEDULE-LAG p50", "SCHEDULE-LAG p99")
#: the send lag is worth a note when its p50 is this share of latency's p50
VISIBLE_LAG = 0.1

#: a workload with ``check:``: its checked clients' verdict, and how many of
#: their serializable reads returned an overwritten value (after KEYS-VERIFIED)
CHECK_ROWS = ("CORRECTNESS", "STALE-SERIALIZABLE-READS")

#: repeated runs only: AVG-THROUGHPUT's coefficient of variation across trials, in %
CV_ROW = "THROUGHPUT-CV"
#: runs of 4 trials or more: AVG-THROUGHPUT's change per minute across them,
#: in % (analyze.stats.trend): a cluster that slows as it fills, under
#: interleave: slices, or a machine that drifted
TREND_ROW = "THROUGHPUT-TREND"

#: runs with ``search:``: the highest offered rate that met the target (None:
#: no rate did), and the search's percentile of latency at that rate, in ms
#: (the rest of the table is that probe's; dbtester.analyze.probes has the rule)
SEARCH_ROWS = SEARCH_METRICS
#: the chart series of a search: its percentile against each offered rate,
#: and the target as a line across them
SEARCH_CURVE = "SEARCH-LATENCY-BY-OFFERED-RATE"
SEARCH_TARGET = "SEARCH-TARGET"

#: type: watch's rows (declared by the type; computed here from its events)
WATCH_ROWS = WatchWorkload.ROWS
#: the chart series of the events' average latency per second, by arrival
WATCH_SERIES = "AVG-WATCH-LATENCY-MS"
#: and of each watcher's p99 event latency, by watcher
WATCH_BY_WATCHER = "WATCH-P99-LATENCY-BY-WATCHER"

#: runs whose samplers ran the host-speed probe (results schema 8): the client
#: machine's mean speed over the load (probe runs per CPU-second, higher is
#: faster), and the least steady host's coefficient of variation of its
#: per-second speed, in % (client and members)
HOST_ROWS = ("HOST-SPEED", "HOST-SPEED-CV")

_PER_SERVER = re.compile(r"^SERVER-(\d+)-NETWORK-(RX|TX)-DATA-SUM$")
#: a companion server's rows (companion_row): SERVER-POSTGRES-MAX-CPU-USAGE
_COMPANION = re.compile(r"^SERVER-[A-Z][A-Z0-9_]*-MAX-(CPU|MEMORY)-USAGE$")

#: client_steps runs: these rows again for each step, named by its client
#: count (CLIENTS-<n>-<row>), each defined as the whole run's row is but over
#: that step's requests (see dbtester.analyze.steps)
STEP_ROWS = ("AVG-THROUGHPUT", "Latency p50", "Latency p99", "SERVER-MAX-CPU-USAGE")
READ_OP, INSERT_OP, READ_MODIFY_WRITE_OP = (
    OPERATIONS.index(op) for op in ("read", "insert", "read-modify-write")
)
_PER_STEP = re.compile(r"^CLIENTS-([1-9][0-9]*)-(.+)$")
_PER_FAULT = re.compile(r"^FAULT-([1-9][0-9]*)(?:-|$)")


#: a mixed load's rows are declared by the type (each operation's, conflicts,
#: stale reads; see _name_stale_reads for the last), and computed here
#: the outcome those reads are given in the analysis (the records keep the
#: kind's not-found outcome)
STALE_READ = "stale-read"


def operation_series(operation: str) -> str:
    """The chart series of ``operation``'s average latency over time."""
    return f"AVG-LATENCY-MS-{operation.upper()}"


def operation_row(operation: str, row: str) -> str:
    """The name of ``row`` (one of OPERATION_ROWS) over ``operation``'s requests."""
    return f"{operation.upper()}-{row}"


def unoperated(row: str) -> tuple[str, str] | None:
    """(operation, row) of a per-operation row's name ("READ-Latency p50" ->
    ("read", "Latency p50")); None for any other row."""
    for op in sorted(OPERATIONS, key=len, reverse=True):  # READ-MODIFY-WRITE before READ
        prefix = f"{op.upper()}-"
        if row.startswith(prefix) and row[len(prefix) :] in OPERATION_ROWS:
            return op, row[len(prefix) :]
    return None


def step_row(clients: int, row: str) -> str:
    """The name of ``row`` (one of STEP_ROWS) measured over the step of ``clients``."""
    return f"CLIENTS-{clients}-{row}"


def unstepped(row: str) -> tuple[int, str] | None:
    """(clients, row) of a per-step row's name; None for any other row."""
    match = _PER_STEP.match(row)
    if match is None or match[2] not in STEP_ROWS:
        return None
    return int(match[1]), match[2]


def table_rows(figures: Sequence[Figures]) -> list[str]:
    """ROWS, with per-server network rows (multi-host runs only) after the
    totals, THROUGHPUT-CV (repeated runs only) after AVG-THROUGHPUT, then the
    per-fault rows (runs with faults only) by fault, and the per-step rows
    (client_steps runs only) at the end, by client count."""
    extra = {row for f in figures for row in f.values if _PER_SERVER.match(row)}
    ordered = sorted(extra, key=lambda r: (len(r), r))  # SERVER-2-... before SERVER-10-...
    rows = list(ROWS)
    at = rows.index("SERVER-TOTAL-NETWORK-TX-DATA-SUM") + 1
    rows = rows[:at] + ordered + rows[at:]
    companions = sorted({row for f in figures for row in f.values if _COMPANION.match(row)})
    at = rows.index("SERVER-MAX-MEMORY-USAGE") + 1
    rows[at:at] = [row for row in DB_SIZE_ROWS if any(row in f.values for f in figures)]
    rows[at:at] = companions
    if any(CV_ROW in f.values for f in figures):
        rows.insert(rows.index("AVG-THROUGHPUT") + 1, CV_ROW)
    if any(TREND_ROW in f.values for f in figures):
        rows.insert(rows.index("AVG-THROUGHPUT") + 1 + (CV_ROW in rows), TREND_ROW)
    if any(SEARCH_ROWS[0] in f.values for f in figures):
        rows[:0] = SEARCH_ROWS  # what the run was for comes first
    if any(WATCH_ROWS[0] in f.values for f in figures):
        rows[:0] = WATCH_ROWS
    if any(CHECK_ROWS[0] in f.values for f in figures):
        at = rows.index("KEYS-VERIFIED") + 1
        rows[at:at] = CHECK_ROWS
    if any(SCHEDULE_ROWS[0] in f.values for f in figures):
        at = rows.index("Latency p99.99") + 1
        rows[at:at] = SCHEDULE_ROWS
    steps = {found for f in figures for row in f.values if (found := unstepped(row))}
    by_step = sorted(steps, key=lambda s: (s[0], STEP_ROWS.index(s[1])))
    numbers = (int(m[1]) for f in figures for r in f.values if (m := _PER_FAULT.match(r)))
    faults = max(numbers, default=0)
    per_fault = [fault_row(k, suffix) for k in range(1, faults + 1) for suffix in FAULT_ROWS]
    rows += [row for row in per_fault if any(row in f.values for f in figures)]
    rows += _operation_table_rows(figures)
    rows += [row for row in HOST_ROWS if any(row in f.values for f in figures)]
    return rows + [step_row(clients, row) for clients, row in by_step]


#: the table's rows by what they are about, in the order a reader wants them
#: (the report groups them; summary.txt keeps the original's order, which
#: scripts and older runs' re-renders rely on)
ROW_GROUPS = (
    "Throughput",
    "Latency",
    "Server",
    "Disk",
    "Client",
    "Host",
    "Faults",
    "By clients",
    "Checks",
)
_CHECKS = (
    "KEYS-VERIFIED",
    "CLIENT-ERROR-COUNT",
    CONFLICT_ROW,
    STALE_ROW,
    *CHECK_ROWS,
    *COUNTER_ROWS,
    *EVENT_ROWS,
    *(row for row in INFORMER_ROWS if not row.endswith("-MS")),
)


def row_group(row: str) -> str:
    """The group of ROW_GROUPS a table row belongs to."""
    if unstepped(row):
        return "By clients"
    # compactions and expirations: maintenance, and its cost
    if _PER_FAULT.match(row) or row in COMPACTION_ROWS or row in EXPIRATION_ROWS:
        return "Faults"
    if row in INFORMER_ROWS and row.endswith("-MS"):
        return "Latency"
    if row in _CHECKS:
        return "Checks"
    if row in HOST_ROWS:
        return "Host"
    if "LATENCY" in row or "Latency" in row:
        return "Latency"
    if row.startswith("SERVER-AVG-"):  # the disk's counters and space
        return "Disk"
    if row.startswith("SERVER-"):
        return "Server"
    if row.startswith("CLIENT-"):
        return "Client"
    return "Throughput"  # TOTAL-*, *-THROUGHPUT, THROUGHPUT-CV


def grouped_rows(rows: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``rows`` by group, in ROW_GROUPS' order, each group's rows in their
    given order; empty groups left out."""
    found: dict[str, list[str]] = {group: [] for group in ROW_GROUPS}
    for row in rows:
        found[row_group(row)].append(row)
    return [(group, members) for group, members in found.items() if members]


def _operation_table_rows(figures: Sequence[Figures]) -> list[str]:
    """The per-operation rows any database has, in OPERATIONS' order,
    CONFLICT-COUNT where a database had conflicts and STALE-READS where one
    counts them."""
    have = {row for f in figures for row in f.values}
    rows = [
        operation_row(op, row)
        for op in OPERATIONS
        for row in OPERATION_ROWS
        if operation_row(op, row) in have
    ]
    counted = (
        CONFLICT_ROW,
        STALE_ROW,
        *COUNTER_ROWS,
        *COMPACTION_ROWS,
        *INFORMER_ROWS,
        *EVENT_ROWS,
        *EXPIRATION_ROWS,
        *LIST_RATE_ROWS,
        *LOCK_ROWS,
    )
    return rows + [row for row in counted if row in have]


@dataclass
class Series:
    x: npt.NDArray[np.float64]
    y: npt.NDArray[np.float64]
    low: npt.NDArray[np.float64] | None = None  # error points (min per bucket)
    high: npt.NDArray[np.float64] | None = None  # error points (max per bucket)
    #: the lowest and highest trial at each x (repeated runs only)
    band: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None


@dataclass(frozen=True)
class Window:
    """A span of the load's own work (a compaction), in seconds since the load started."""

    start_s: float
    end_s: float


@dataclass
class Figures:
    """One database: raw row values (None = no data) and chart series."""

    values: dict[str, float | int | str | None] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: what each scheduled fault did (runs with faults only; per trial)
    faults: list[FaultSummary] = field(default_factory=list)
    #: every request's latency by when it was due (one trial's: the median's)
    heatmap: Heatmap | None = None
    #: what the load itself did that the charts over time mark in the
    #: database's colour: its compactions (one trial's: the heatmap's)
    windows: list[Window] = field(default_factory=list)


def compute(data: DatabaseData) -> Figures:
    figures = Figures()
    data = _name_stale_reads(data)
    _client_rows(data, figures)
    _stale_reads(data, figures)
    _server_rows(data, figures)
    _companion_rows(data, figures)
    _host_rows(data, figures)
    _faults(data, figures)
    _search(data, figures)
    _watch(data, figures)
    _verification(data, figures)
    if data.records is not None:
        figures.heatmap = latency_heatmap(data.records, data.load_start)
    if note := unserved(data, figures.faults):
        figures.notes.append(f"{data.label}: {note}")
    return figures


# --------------------------------------------------------------------------- open loop

#: an open-loop load served below this share of its offered rate fell behind
SERVED = 0.97
#: too short a stretch before the first fault says nothing about keeping up
MIN_SERVED_S = 1.0


def offered_rate(data: DatabaseData) -> float:
    """The open-loop rate the workload asked for (a search: the rate of the
    probe whose requests the trial holds; 0: closed loop, or a run recorded
    before run.json kept the workload)."""
    search = data.record.search
    if search is not None and search.chosen is not None:
        return search.probes[search.chosen - 1].offered
    workload = data.record.database.get("workload")
    rate = workload.get("rate") if isinstance(workload, dict) else None
    return float(rate) if isinstance(rate, int | float) and rate > 0 else 0.0


def served_rate(
    data: DatabaseData, faults: Sequence[FaultSummary] = ()
) -> tuple[float, float, str] | None:
    """(offered, served, where) of an open-loop run: requests/s asked for and
    answered while requests were still being scheduled — from the first due
    time to the last, or to the first fault (a fault's own effect is the fault
    rows' business). A database that keeps up answers all but the few in
    flight at the end; one that cannot, only its capacity. None for a closed
    loop, or too short a stretch to tell."""
    rate = offered_rate(data)
    records = data.records
    if not rate or records is None or len(records) == 0:
        return None
    due_s = records.due_ns / 1e9 - data.load_start
    done_s = due_s + records.latency_ns / 1e9
    begin, end = float(due_s.min()), float(due_s.max())
    where = ""
    if faults:
        end = min(end, *(f.start_s for f in faults))
        where = " before the first fault"
    if end - begin < MIN_SERVED_S:
        return None
    served = float(((records.code == 0) & (done_s <= end)).sum()) / (end - begin)
    return rate, served, where


def unserved(data: DatabaseData, faults: Sequence[FaultSummary] = ()) -> str | None:
    """Why an open-loop run's latency rows include queueing: it was offered
    more than it served (see :func:`served_rate`). None when it kept up. When
    the client was the bottleneck (:func:`client_bound`), the note says so
    instead of blaming the database: the two notes name one cause."""
    found = served_rate(data, faults)
    if found is None:
        return None
    rate, served, where = found
    if served >= SERVED * rate:
        return None
    said = (
        f"offered {rate:,.0f} requests/s (open loop) but {served:,.0f}/s were answered"
        f"{where} ({served / rate:.0%}): "
    )
    if client_bound(data):
        return said + "the client could not keep up (see its note), not the database"
    return said + (
        "the database could not keep up, so requests queued and the latency rows"
        " measure that queue as much as the database's service time"
    )


def _search(data: DatabaseData, figures: Figures) -> None:
    """A search's rows and its latency-against-offered-rate curve."""
    search = data.record.search
    if search is None:
        return
    best = search.probes[search.chosen - 1] if search.chosen else None
    passed = search.maximum is not None and best is not None
    figures.values[SEARCH_ROWS[0]] = search.maximum
    figures.values[SEARCH_ROWS[1]] = best.latency_ms if passed and best else None
    if not search.probes:
        return
    # the maximum's second look would draw a second point at its rate
    probes = sorted((p for p in search.probes if not p.again), key=lambda p: p.offered)
    rates = np.array([p.offered for p in probes])
    figures.series[SEARCH_CURVE] = Series(rates, np.array([p.latency_ms for p in probes]))
    ends = np.array([rates.min(), rates.max()])
    figures.series[SEARCH_TARGET] = Series(ends, np.array([search.slo_ms, search.slo_ms]))


#: events taken at a time where every event is looked at: 10^7 of them as
#: int64 and float64 at once would add 320 MB to the analysis' peak
_CHUNK = 1 << 20


def _mean_by_second(watch: WatchEvents, offset_ms: int, first: int, last: int) -> Series:
    """The events' mean latency (ms) per second of arrival since the load
    started (``offset_ms``: the log's origin on that clock)."""
    low = (first + offset_ms) // 1000
    seconds = (last + offset_ms) // 1000 - low + 1
    sums = np.zeros(seconds)
    counts = np.zeros(seconds, dtype=np.int64)
    for at in range(0, len(watch), _CHUNK):
        part = slice(at, at + _CHUNK)
        second = (watch.arrival_ms[part].astype(np.int64) + offset_ms) // 1000 - low
        sums += np.bincount(second, weights=watch.latency_us[part], minlength=seconds)
        counts += np.bincount(second, minlength=seconds)
    seen = counts > 0
    return Series((np.flatnonzero(seen) + low).astype(float), sums[seen] / counts[seen] / 1e3)


def _p99_by_watcher(watch: WatchEvents) -> Series:
    """Each watcher's p99 event latency (ms), by watcher number; a watcher
    that received nothing has no point."""
    numbers, p99s = [], []
    for number in range(watch.watchers):
        # one mask at a time: 10^7 pairs need no sorted copy
        latencies = watch.latency_us[watch.watcher == number]
        if len(latencies):
            numbers.append(float(number))
            p99s.append(float(np.percentile(latencies, 99)) / 1e3)
    return Series(np.array(numbers), np.array(p99s))


def _watch(data: DatabaseData, figures: Figures) -> None:
    """A watch load's rows and its latency-over-time series."""
    watch = data.watch
    if watch is None:
        return
    acknowledged = int(watch.acknowledged().sum())
    values = figures.values
    values["WATCH-EVENTS-EXPECTED"] = watch.watchers * acknowledged
    values["WATCH-EVENTS-RECEIVED"] = int(watch.received().sum())
    values["WATCH-EVENTS-MISSED"] = int(watch.missed().sum())
    values["WATCH-EVENTS-DUPLICATED"] = int(watch.duplicates.sum())
    values["WATCH-EVENTS-OUT-OF-ORDER"] = int(watch.out_of_order.sum())
    values["WATCH-EVENTS-COALESCED"] = int(watch.coalesced.sum())
    # Every (event, watcher) pair: 10^7 of them for 100 watchers of 100,000
    # puts, so one sort for all the percentiles, and integer seconds.
    if len(watch) == 0:
        for p in WATCH_PERCENTILES:
            values[f"WATCH-LATENCY p{p:g}"] = None
        values["WATCH-LATENCY-MAX"] = values["WATCH-EVENTS-PER-SEC"] = None
        return
    found = np.percentile(watch.latency_us, WATCH_PERCENTILES)
    for p, us in zip(WATCH_PERCENTILES, found, strict=True):
        values[f"WATCH-LATENCY p{p:g}"] = float(us) / 1e3
    values["WATCH-LATENCY-MAX"] = float(watch.latency_us.max()) / 1e3
    # seconds since the load started, by arrival
    offset_ms = round((watch.origin_unix_ns / 1e9 - data.load_start) * 1e3)
    first, last = int(watch.arrival_ms.min()), int(watch.arrival_ms.max())
    span = (last - first) / 1e3
    values["WATCH-EVENTS-PER-SEC"] = len(watch) / span if span > 0 else None
    figures.series[WATCH_SERIES] = _mean_by_second(watch, offset_ms, first, last)
    figures.series[WATCH_BY_WATCHER] = _p99_by_watcher(watch)
    if unexpected := watch.unexpected():
        figures.notes.append(
            f"{data.label}: {unexpected:,} watch events were of puts whose writer got no"
            " acknowledgement (the put took effect, its reply was lost): they count as"
            " received but not as expected"
        )
    if int(watch.foreign.sum()):
        figures.notes.append(
            f"{data.label}: {int(watch.foreign.sum()):,} watch events named keys this load"
            " did not write (another client's, or an earlier run's) and are in no figure"
        )


# --------------------------------------------------------------------------- hosts

#: steal time above this share of the load's CPU time is worth a note
STEAL_NOTE = 0.01


def _speed(frame: pd.DataFrame) -> pd.Series:
    """Per-second host speed: probe runs per CPU-second (higher is faster)."""
    return 1e9 / frame["probe_ns"].clip(lower=1)


def _host_rows(data: DatabaseData, figures: Figures) -> None:
    """HOST-SPEED and HOST-SPEED-CV from the probe's samples in the load
    window, the HOST-SPEED chart (the client machine's), and a note when the
    hypervisor took a noticeable share of the client machine's CPUs."""
    client = _in_window(data.client, data)
    others = (*data.load_hosts, *data.servers)
    hosts = [f for f in (client, *(_in_window(s, data) for s in others)) if f is not None]
    hosts = [f for f in hosts if "probe_ns" in f.columns]
    if not hosts:
        return
    cvs = [_cv(_speed(f)) for f in hosts if len(f) >= 2]
    if cvs:
        figures.values["HOST-SPEED-CV"] = max(cvs)
    if client is None or "probe_ns" not in client.columns:
        return
    speed = _speed(client)
    figures.values["HOST-SPEED"] = float(speed.mean())
    figures.series["HOST-SPEED"] = Series(client["t"].to_numpy(dtype=float), speed.to_numpy())
    load = data.record.load
    cores = data.client_cores
    if load is not None and cores and "steal_ms" in client.columns:
        span = max(load.ended_unix - load.started_unix, 1e-3)
        share = float(client["steal_ms"].sum()) / 1000 / (span * cores)
        if share > STEAL_NOTE:
            figures.notes.append(
                f"{data.label}: the hypervisor took {share:.1%} of the client machine's CPU"
                " time during the load (steal time), so every figure ran on less machine"
            )


def _cv(values: pd.Series) -> float:
    """Coefficient of variation, in % (sample standard deviation / mean)."""
    mean = float(values.mean())
    return float(values.std(ddof=1)) * 100.0 / mean if mean else 0.0


def _faults(data: DatabaseData, figures: Figures) -> None:
    """The FAULT-<k>-... rows, and a note per fault on its errors and on a
    load that did not recover from it."""
    trial = data.record.trial
    found = fault_figures(data.records, data.record.faults, data.load_start)
    if data.watch is not None:
        found = watch_fault_figures(found, data.watch, data.load_start)
    if data.lock_holds is not None:
        found = lock_fault_figures(found, data.lock_holds, data.load_start)
    figures.faults = [f.model_copy(update={"trial": trial}) for f in found]
    for f in found:
        figures.values.update(fault_values(f))
        who = f"; member {f.member}" if f.member is not None else ""
        did = f" took {f.took_s:.2f} s ({f.detail});" if f.took_s is not None else ""
        said = (
            f"{data.label}: fault {f.number} ({f.description}{who}, at"
            f" {f.start_s:.2f} s):{did} no success for {f.unavailable_s:.2f} s from"
            f" {f.unavailable_from_s:.2f} s"
        )
        if f.errors:
            said += "; errors until the next fault or the end: " + ", ".join(
                f"{kind} {n:,}" for kind, n in f.errors.items()
            )
        if not f.recovered:
            said += "; throughput did not come back to 90% of its level before it within the load"
        figures.notes.append(said)


# --------------------------------------------------------------------------- client


def _client_rows(data: DatabaseData, figures: Figures) -> None:
    records = data.records
    v = figures.values
    if records is None or len(records) == 0:
        return
    done_s = (records.due_ns + records.latency_ns) / 1e9 - data.load_start
    first_due = records.due_ns.min() / 1e9 - data.load_start
    total = records.span_s(data.load_start)
    ok = records.code == 0
    # Latency figures are of answered requests: a refused connection answers in
    # microseconds and would make a failing database look fast.
    latency_ms = records.latency_ns[ok] / 1e6
    v["TOTAL-SECONDS"] = total
    v["TOTAL-REQUEST-NUMBER"] = len(records)
    per_second = _per_second(done_s[ok] - first_due)
    full = per_second[:-1] if len(per_second) > 1 else per_second  # the last second is partial
    v["MAX-THROUGHPUT"] = int(full.max()) if len(full) else 0
    v["AVG-THROUGHPUT"] = records.throughput(data.load_start)
    v["MIN-THROUGHPUT"] = int(full.min()) if len(full) else 0
    # Stale reads a serializable workload allows are the database keeping its
    # promise, not errors (as conflicts are not).
    allowed = _allowed_stale(data, records)
    v["CLIENT-ERROR-COUNT"] = records.errors() - int(allowed.sum())
    if len(latency_ms):
        v["FASTEST-LATENCY"] = float(latency_ms.min())
        v["AVG-LATENCY"] = float(latency_ms.mean())
        v["SLOWEST-LATENCY"] = float(latency_ms.max())
        values = np.percentile(latency_ms, PERCENTILES)
        for p, value in zip(PERCENTILES, values, strict=True):
            v[f"Latency p{p:g}"] = float(value)
    load = data.record.load
    if load is not None and load.cpu_seconds:
        v["CLIENT-CPU-SECONDS-PER-10K-REQUESTS"] = 1e4 * load.cpu_seconds / len(records)
    seconds = np.floor(np.maximum(done_s[ok] - first_due, 0)).astype(np.int64)
    figures.series["AVG-THROUGHPUT"] = Series(
        np.arange(len(per_second), dtype=float) + first_due, per_second.astype(float)
    )
    sums = np.bincount(seconds, weights=latency_ms)
    counts = np.bincount(seconds)
    have = counts > 0
    figures.series["AVG-LATENCY-MS"] = Series(
        np.nonzero(have)[0].astype(float) + first_due, sums[have] / counts[have]
    )
    _latency_by_key(records.latency_ns, done_s, ok, figures)
    _operation_rows(data, records, figures)
    _counter_rows(data, records, figures)
    if data.lock_holds is not None:
        counters = data.record.load.counters if data.record.load is not None else {}
        figures.values.update(lock_values(data.lock_holds, counters, _lock_ttl_s(data)))
        _lock_series(data.lock_holds, data.load_start, figures)
    _schedule_lag(data, records, figures)
    _client_metrics(data, figures)
    # A failure is timed by when the request was sent: a timeout completes only
    # request_timeout_s later, long after the trouble began. Not by when it was
    # due: in open loop a request may wait for a free client long past that.
    conflict = records.codes.index("conflict") if "conflict" in records.codes else -1
    failed = ~ok & ~allowed & (records.code != conflict)  # a lost race is no failure
    sent_s = records.sent_ns()[failed] / 1e9 - data.load_start - first_due
    _failure_note(data, figures, sent_s, per_second, bool(allowed.any()))


#: the chart series of a lock load: each second's median handover, and
#: each locker's acquisitions
HANDOVER_SERIES = "LOCK-HANDOVER-MS"
ACQUISITIONS_BY_LOCKER = "LOCK-ACQUISITIONS-BY-LOCKER"


def _lock_series(holds: LockHolds, load_start: float, figures: Figures) -> None:
    seconds, medians = handover_per_second(holds, load_start)
    if len(seconds):
        figures.series[HANDOVER_SERIES] = Series(seconds, medians)
    if len(holds):
        figures.series[ACQUISITIONS_BY_LOCKER] = Series(*acquisitions_by_locker(holds))


def _lock_ttl_s(data: DatabaseData) -> float:
    """The lock load's session TTL as run.json keeps its workload."""
    workload = data.record.database.get("workload")
    ttl = workload.get("ttl") if isinstance(workload, dict) else None
    return (
        float(ttl)
        if isinstance(ttl, int | float)
        else float(LockWorkload.model_fields["ttl"].default)
    )


def _schedule_lag(data: DatabaseData, records: Records, figures: Figures) -> None:
    """An open-loop load's send lag (SCHEDULE-LAG rows, always there: no data
    for records saved before it was recorded), and notes when it, or the
    queue for a free client, is a visible part of the latency."""
    if offered_rate(data) <= 0:
        return
    v = figures.values
    lag_ms = records.send_lag_ns() / 1e6
    v.update(dict.fromkeys(SCHEDULE_ROWS))
    if len(lag_ms):
        p50, p99 = (float(x) for x in np.percentile(lag_ms, (50, 99)))
        v[SCHEDULE_ROWS[0]], v[SCHEDULE_ROWS[1]] = p50, p99
        latency = v.get("Latency p50")
        if isinstance(latency, float) and latency > 0 and p50 >= VISIBLE_LAG * latency:
            figures.notes.append(
                f"{data.label}: the engine sent requests {p50:.3f} ms after their due time at"
                f" p50 ({p99:.3f} ms at p99), {p50 / latency:.0%} of the p50 latency: every"
                " latency figure includes it (the client, not the database)"
            )
    queued = int((records.waited == 1).sum())
    if queued:
        waits = records.latency_ns[records.waited == 1] - records.service_ns[records.waited == 1]
        figures.notes.append(
            f"{data.label}: {queued:,} requests ({queued / len(records):.1%}) found every"
            f" client busy at their due time and waited for one (p99 wait"
            f" {float(np.percentile(waits, 99)) / 1e6:.3f} ms): the open loop's queue, counted"
            " in their latency and not in SCHEDULE-LAG"
        )


def _operation_rows(data: DatabaseData, records: Records, figures: Figures) -> None:
    """Throughput and latency per operation, where the load mixed several."""
    v = figures.values
    conflicts = records.counts().get("conflict", 0)
    if conflicts:
        v[CONFLICT_ROW] = conflicts
    if len(records.operations()) < 2:
        return
    span = records.span_s(data.load_start)
    for number, op in enumerate(OPERATIONS):
        mine = records.ops == number
        if not mine.any():
            continue
        answered = mine & (records.code == 0)
        v[operation_row(op, "THROUGHPUT")] = float(answered.sum() / span) if span > 0 else 0.0
        latency_ms = records.latency_ns[answered] / 1e6
        if len(latency_ms):
            figures.series[operation_series(op)] = _latency_per_second(
                records, answered, data.load_start
            )
            p50, p99, p999 = np.percentile(latency_ms, (50, 99, 99.9))
            v[operation_row(op, "Latency p50")] = float(p50)
            v[operation_row(op, "Latency p99")] = float(p99)
            v[operation_row(op, "Latency p99.9")] = float(p999)
            v[operation_row(op, "Latency max")] = float(latency_ms.max())


def _counter_rows(data: DatabaseData, records: Records, figures: Figures) -> None:
    """What the load counted beside its requests (Kubernetes' traffic's
    conflicts, retries, skipped verbs, list pages), what its lists
    delivered per second of the load, and its latency during compactions
    against outside them."""
    load = data.record.load
    counters = load.counters if load is not None else {}
    if not counters:
        return
    v = figures.values
    for row, name in COUNTER_ROWS.items():
        if name in counters:
            v[row] = counters[name]
    span = records.span_s(data.load_start)
    for row, (name, scale) in LIST_RATE_ROWS.items():
        if name in counters and span > 0:
            v[row] = counters[name] * scale / span
    if load is not None:
        v.update(compaction_values(load.compactions, records))
        v.update(informer_values(load.informers, data.informer_lags))
        if counters.get("event_leases"):
            v.update({row: counters[name] for row, name in EVENT_ROWS.items() if name})
            v["EXPIRATIONS-PER-S-MAX"] = max((n for _, n in load.expirations), default=0)
            v.update(expiration_values(load.expirations, records))
        _kubernetes_series(data, figures)


#: the chart series of a Kubernetes load's expirations per second, and of
#: each informer's p99 event lag by informer
EXPIRATION_SERIES = "EXPIRATIONS-PER-S"
INFORMER_BY_INFORMER = "INFORMER-P99-LAG-BY-INFORMER"


def _kubernetes_series(data: DatabaseData, figures: Figures) -> None:
    """Its compactions as windows, expirations over time, informers' lag."""
    load = data.record.load
    assert load is not None
    start = data.load_start
    figures.windows = [
        Window(c.started_unix - start, c.ended_unix - start) for c in load.compactions
    ]
    if load.expirations:
        seconds, counts = zip(*load.expirations, strict=True)
        figures.series[EXPIRATION_SERIES] = Series(
            np.array(seconds, dtype=float) - start, np.array(counts, dtype=float)
        )
    if data.informer_lags is not None and len(data.informer_lags):
        numbers, p99s = p99_by_informer(data.informer_lags)
        figures.series[INFORMER_BY_INFORMER] = Series(np.array(numbers), np.array(p99s))


def _latency_per_second(records: Records, mask: npt.NDArray[np.bool_], load_start: float) -> Series:
    """Average latency (ms) of the ``mask``ed requests, per second of completion."""
    first_due = records.due_ns.min() / 1e9 - load_start
    done_s = (records.due_ns[mask] + records.latency_ns[mask]) / 1e9 - load_start
    seconds = np.floor(np.maximum(done_s - first_due, 0)).astype(np.int64)
    sums = np.bincount(seconds, weights=records.latency_ns[mask] / 1e6)
    counts = np.bincount(seconds)
    have = counts > 0
    return Series(np.nonzero(have)[0].astype(float) + first_due, sums[have] / counts[have])


def _failure_note(
    data: DatabaseData,
    figures: Figures,
    failed_at: npt.NDArray[np.float64],
    per_second: npt.NDArray[np.int64],
    stale_allowed: bool = False,
) -> None:
    """Say what failed, by kind, and when throughput fell: the table's one error
    count does not tell a slow trickle from a cluster that went away. Stale
    reads the workload's consistency allows did not fail (``stale_allowed``)."""
    if len(failed_at) == 0 or data.records is None:
        return
    skip = {*NOT_ERRORS, STALE_READ} if stale_allowed else set(NOT_ERRORS)
    kinds = {k: n for k, n in data.records.counts().items() if k not in skip}
    listed = ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    first = float(max(failed_at.min(), 0.0))
    second = int(first)
    before = int(per_second[second - 1]) if 0 < second <= len(per_second) else None
    after = int(per_second[second + 1]) if second + 1 < len(per_second) else 0
    fell = (
        f"; throughput went from {before:,} req/s in the second before to {after:,} req/s"
        " in the second after"
        if before is not None
        else ""
    )
    figures.notes.append(
        f"{data.label}: {len(failed_at):,} requests failed ({listed}); the first"
        f" {first:.1f} s into the load{fell}"
    )


def _workload(data: DatabaseData) -> dict[str, object]:
    workload = data.record.database.get("workload")
    return workload if isinstance(workload, dict) else {}


def _name_stale_reads(data: DatabaseData) -> DatabaseData:
    """``data`` with the stale reads of a mixed workload named STALE_READ
    instead of the kind's not-found outcome (the record's
    ``not_found_outcome``: ZooKeeper's NoNode, NATS's key-not-found).

    A mixed workload never deletes; its reads (and read-modify-writes' reads)
    go only to the load phase's keys, which every member had before the load
    began (the readiness check), or to inserts already acknowledged (``latest``
    follows them). A member that answers a read before it has applied a write
    the leader committed (ZooKeeper's session member; a NATS replica's direct
    get) finds no key. Unless an insert failed: ``latest`` may then pick a key
    whose insert never happened, so not-found is no proof of staleness and
    stays what it is."""
    records = data.records
    missing = data.record.not_found_outcome
    if (
        records is None
        or not missing
        or missing not in records.codes
        or not _missing_is_stale(data)
        or len(records.codes) >= 255  # no room for another outcome
    ):
        return data
    reading = np.isin(records.ops, (READ_OP, READ_MODIFY_WRITE_OP))
    inserting = records.ops == INSERT_OP
    if (inserting & (records.code != 0)).any():
        return data
    stale = reading & (records.code == records.codes.index(missing))
    if not stale.any():
        return data
    codes = [*records.codes, STALE_READ] if STALE_READ not in records.codes else records.codes
    code = records.code.copy()
    code[stale] = codes.index(STALE_READ)
    return replace(data, records=replace(records, code=code, codes=codes))


def _missing_is_stale(data: DatabaseData) -> bool:
    """Whether the database's workload type reads only keys that exist (its
    ``STALE_IF_MISSING``), so a read that finds none was stale."""
    workload_type = TYPES.get(str(_workload(data).get("type")))
    return workload_type is not None and workload_type.STALE_IF_MISSING


def _linearizable(data: DatabaseData) -> bool:
    """Whether the workload's reads asked for linearizable consistency (the default)."""
    return _workload(data).get("consistency", "linearizable") != "serializable"


def _allowed_stale(data: DatabaseData, records: Records) -> npt.NDArray[np.bool_]:
    """The stale reads the workload's consistency allows: all of them with
    ``serializable``, none with ``linearizable``."""
    if STALE_READ not in records.codes or _linearizable(data):
        return np.zeros(len(records), dtype=bool)
    stale: npt.NDArray[np.bool_] = records.code == records.codes.index(STALE_READ)
    return stale


def _stale_reads(data: DatabaseData, figures: Figures) -> None:
    """STALE-READS for a mixed workload on a kind whose missing key is an
    outcome of its own, and a note on any."""
    records = data.records
    if records is None or not data.record.not_found_outcome:
        return
    if not _missing_is_stale(data):
        return
    if not np.isin(records.ops, (READ_OP, READ_MODIFY_WRITE_OP)).any():
        return
    stale = records.counts().get(STALE_READ, 0)
    figures.values[STALE_ROW] = stale
    if not stale:
        return
    missing = data.record.not_found_outcome
    said = (
        f"{data.label}: {stale:,} reads were stale: each found no key ({missing}) although"
        " the key had been written and its write acknowledged before the read was sent"
        " (a key of the load phase, or an acknowledged insert): the member that answered"
        " had not applied it yet."
    )
    if _linearizable(data):
        said += (
            " The workload asked for linearizable reads, which must see every acknowledged"
            " write: these count as errors"
        )
    else:
        said += (
            " consistency: serializable allows them (a member answers from what it has):"
            " they count in STALE-READS, not as errors"
        )
    figures.notes.append(said)


def _per_second(seconds: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    if len(seconds) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.bincount(np.floor(np.maximum(seconds, 0)).astype(np.int64))


def _latency_by_key(
    latency_ns: npt.NDArray[np.int64],
    done_s: npt.NDArray[np.float64],
    ok: npt.NDArray[np.bool_],
    figures: Figures,
    buckets: int = 100,
) -> None:
    """Latency against the number of keys written so far (in completion order)."""
    order = np.argsort(done_s[ok], kind="stable")
    lat = (latency_ns[ok] / 1e6)[order]
    if len(lat) == 0:
        return
    size = max(1, len(lat) // buckets)
    usable = len(lat) // size * size
    groups = lat[:usable].reshape(-1, size)
    x = (np.arange(len(groups), dtype=float) + 1) * size
    series = Series(x, groups.mean(axis=1), groups.min(axis=1), groups.max(axis=1))
    figures.series["AVG-LATENCY-MS-BY-KEY"] = series
    figures.series["AVG-LATENCY-MS-BY-KEY-ERROR-POINTS"] = series


def _client_metrics(data: DatabaseData, figures: Figures) -> None:
    """The client's network totals and peaks; with several load hosts, the
    network summed over them and the CPU and memory of the busiest."""
    machines = [_in_window(f, data) for f in (data.client, *data.load_hosts)]
    frames = [f for f in machines if f is not None]
    if not frames:
        return
    v = figures.values
    v["CLIENT-TOTAL-NETWORK-RX-SUM"] = int(sum(f["receive_bytes"].sum() for f in frames))
    v["CLIENT-TOTAL-NETWORK-TX-SUM"] = int(sum(f["transmit_bytes"].sum() for f in frames))
    v["CLIENT-MAX-CPU-USAGE"] = float(max(f["cpu_percent"].max() for f in frames))
    v["CLIENT-MAX-MEMORY-USAGE"] = int(max(f["rss_bytes"].max() for f in frames))


def _in_window(frame: pd.DataFrame | None, data: DatabaseData) -> pd.DataFrame | None:
    """Samples from the load's start to its end (plus the second in progress)."""
    if frame is None:
        return None
    load = data.record.load
    end = (load.ended_unix if load is not None else 0.0) - data.load_start
    window = frame[(frame["t"] >= -0.5) & (frame["t"] <= max(end, 0.0) + 1.0)]
    return window if len(window) else None


# --------------------------------------------------------------------------- server

SERVER_SERIES: dict[str, tuple[str, Callable[[pd.Series], float] | str, float]] = {
    # chart name: (CSV column, aggregate over members per second, scale)
    "AVG-CPU": ("cpu_percent", "mean", 1.0),
    "MAX-CPU": ("cpu_percent", "max", 1.0),
    "AVG-VMRSS-MB": ("rss_bytes", "mean", 1e-6),
    "AVG-VOLUNTARY-CTXT-SWITCHES": ("voluntary_ctxt_switches", "mean", 1.0),
    "AVG-NON-VOLUNTARY-CTXT-SWITCHES": ("nonvoluntary_ctxt_switches", "mean", 1.0),
    "AVG-READS-COMPLETED-DELTA": ("reads_completed", "mean", 1.0),
    "AVG-SECTORS-READ-DELTA": ("sectors_read", "mean", 1.0),
    "AVG-WRITES-COMPLETED-DELTA": ("writes_completed", "mean", 1.0),
    "AVG-SECTORS-WRITTEN-DELTA": ("sectors_written", "mean", 1.0),
    "AVG-READ-BYTES-NUM-DELTA": ("read_bytes", "mean", 1.0),
    "AVG-WRITE-BYTES-NUM-DELTA": ("write_bytes", "mean", 1.0),
    "AVG-RECEIVE-BYTES-NUM-DELTA": ("receive_bytes", "mean", 1.0),
    "AVG-TRANSMIT-BYTES-NUM-DELTA": ("transmit_bytes", "mean", 1.0),
}


def companion_row(name: str, row: str) -> str:
    """A companion server's row: ``SERVER-POSTGRES-MAX-CPU-USAGE`` for
    ``postgres`` and ``MAX-CPU-USAGE``."""
    return f"SERVER-{name.upper()}-{row}"


def _companion_rows(data: DatabaseData, figures: Figures) -> None:
    """Each companion server's busiest second and largest memory (over its
    members, when several have one), apart from the members' own."""
    for name in sorted({name for name, _ in data.companions}):
        frames = [_in_window(f, data) for n, f in data.companions if n == name]
        found = [f for f in frames if f is not None]
        if found:
            samples = pd.concat(found, ignore_index=True)
            figures.values[companion_row(name, "MAX-CPU-USAGE")] = float(
                samples["cpu_percent"].max()
            )
            figures.values[companion_row(name, "MAX-MEMORY-USAGE")] = int(
                samples["rss_bytes"].max()
            )


def _server_rows(data: DatabaseData, figures: Figures) -> None:
    frames = [f for f in (_in_window(s, data) for s in data.servers) if f is not None]
    v = figures.values
    members = data.record.members
    if members:
        usage = [m.disk_usage_bytes for m in members]
        v["SERVER-AVG-DISK-SPACE-USAGE"] = float(np.mean(usage))
    if not frames:
        return
    samples = pd.concat(frames, ignore_index=True)
    # On one machine every member sees the same disk and interface counters:
    # count them once, not once per member.
    machine = frames[:1] if data.shared_host else frames
    net = pd.concat(machine, ignore_index=True)
    v["SERVER-TOTAL-NETWORK-RX-DATA-SUM"] = int(net["receive_bytes"].sum())
    v["SERVER-TOTAL-NETWORK-TX-DATA-SUM"] = int(net["transmit_bytes"].sum())
    if not data.shared_host:  # one machine per member: each has its own interface
        for frame in frames:  # numbered by member, even when one has no samples
            i = int(frame["member"].iloc[0]) + 1
            v[f"SERVER-{i}-NETWORK-RX-DATA-SUM"] = int(frame["receive_bytes"].sum())
            v[f"SERVER-{i}-NETWORK-TX-DATA-SUM"] = int(frame["transmit_bytes"].sum())
    v["SERVER-MAX-CPU-USAGE"] = float(samples["cpu_percent"].max())
    v["SERVER-MAX-MEMORY-USAGE"] = int(samples["rss_bytes"].max())
    disk_rows = {
        "SERVER-AVG-READS-COMPLETED-DELTA-SUM": "reads_completed",
        "SERVER-AVG-SECTORS-READS-DELTA-SUM": "sectors_read",
        "SERVER-AVG-WRITES-COMPLETED-DELTA-SUM": "writes_completed",
        "SERVER-AVG-SECTORS-WRITTEN-DELTA-SUM": "sectors_written",
    }
    for row, column in disk_rows.items():
        v[row] = float(np.mean([f[column].sum() for f in machine]))
    samples["second"] = np.floor(samples["t"]).astype(int)
    for chart, (column, how, scale) in SERVER_SERIES.items():
        per_second = samples.groupby("second")[column].agg(how) * scale
        figures.series[chart] = Series(
            per_second.index.to_numpy(dtype=float), per_second.to_numpy(dtype=float)
        )
    _memory_by_key(data, samples, figures)
    _database_size(samples, figures)


#: the members' database size, where their kind reports one (etcd's dbSize,
#: dbSizeInUse): its largest sample during the load (bytes), and the chart
#: series of its average over the members each second (MB)
DB_SIZE_ROWS = ("SERVER-MAX-DB-SIZE", "SERVER-MAX-DB-SIZE-IN-USE")
DB_SIZE_SERIES = ("AVG-DB-SIZE-MB", "AVG-DB-SIZE-IN-USE-MB")


def _database_size(samples: pd.DataFrame, figures: Figures) -> None:
    for column, row, chart in zip(STORAGE_COLUMNS, DB_SIZE_ROWS, DB_SIZE_SERIES, strict=True):
        if column not in samples.columns:
            return  # a kind that reports no size, or results older than schema 18
        said = samples[samples[column] >= 0]  # -1: a second the member did not say
        if not len(said):
            continue
        figures.values[row] = int(said[column].max())
        per_second = said.groupby("second")[column].mean() / 1e6
        figures.series[chart] = Series(
            per_second.index.to_numpy(dtype=float), per_second.to_numpy(dtype=float)
        )


def _memory_by_key(data: DatabaseData, samples: pd.DataFrame, figures: Figures) -> None:
    """Server memory against the keys written by the time of each sample."""
    records = data.records
    if records is None or len(records) == 0:
        return
    ok = records.code == 0
    done = np.sort((records.due_ns[ok] + records.latency_ns[ok]) / 1e9 - data.load_start)
    per_second = samples.groupby("second")["rss_bytes"].agg(["mean", "min", "max"]) / 1e6
    keys = np.searchsorted(done, per_second.index.to_numpy(dtype=float) + 1.0)
    series = Series(
        keys.astype(float),
        per_second["mean"].to_numpy(dtype=float),
        per_second["min"].to_numpy(dtype=float),
        per_second["max"].to_numpy(dtype=float),
    )
    figures.series["AVG-VMRSS-MB-BY-KEY"] = series
    figures.series["AVG-VMRSS-MB-BY-KEY-ERROR-POINTS"] = series


def _correctness(data: DatabaseData, figures: Figures) -> None:
    """The checked clients' verdict, and their first violation in words."""
    record = data.record.correctness
    if record is None:
        return
    figures.values["CORRECTNESS"] = describe_correctness(record)
    violation = record.violation
    where = f", during {violation.during_fault}" if violation and violation.during_fault else ""
    if record.model in ("informer", "lock"):
        judged = "informers" if record.model == "informer" else "locks"
        of = record.clients if record.model == "informer" else record.keys
        if violation is not None:
            figures.notes.append(
                f"{data.label}: {judged.upper()} BROKEN: {violation.key}: {violation.reason}"
                f" ({record.violated_keys} of {of} {judged} wrong)"
            )
        return
    if record.watch is not None:
        if violation is not None:
            counts = record.watch
            figures.notes.append(
                f"{data.label}: WATCH GUARANTEES BROKEN: {violation.key} {violation.reason}"
                f"{where}. Over all watchers: {counts.missed:,} missed,"
                f" {counts.duplicated:,} duplicated, {counts.out_of_order:,} out of order,"
                f" {counts.split:,} split revisions"
            )
        return
    figures.values["STALE-SERIALIZABLE-READS"] = record.stale_serializable_reads
    if violation is None:
        return
    said = "; ".join(
        f"client {op.client}"
        + (f" (member {op.member})" if op.member is not None else "")
        + f" {op.kind} {op.value} from {op.invoked_unix - data.load_start:.3f} s"
        + (
            f" to {op.completed_unix - data.load_start:.3f} s"
            if op.completed_unix is not None
            else " (no reply)"
        )
        for op in violation.operations
    )
    figures.notes.append(
        f"{data.label}: NOT LINEARIZABLE: key {violation.key}: {violation.reason}{where}."
        f" The operations (seconds since the load began): {said}"
    )


def _verification(data: DatabaseData, figures: Figures) -> None:
    verification = data.record.verification
    if verification is not None:
        state = "OK" if verification.ok else "FAILED"
        figures.values["KEYS-VERIFIED"] = (
            f"{verification.found:,} / {verification.expected_min:,} {state}"
        )
    _correctness(data, figures)
    figures.notes += [f"{data.label}: {note}" for note in data.record.notes]
    if note := client_bound(data):
        figures.notes.append(f"{data.label}: {note}")
    if data.shared_host and data.servers:
        figures.notes.append(
            f"{data.label}: members and client ran on one machine and share its loopback"
            " interface, so every network row counts all traffic on it"
        )
    if data.record.error:
        figures.notes.append(f"{data.label}: FAILED: {data.record.error}")


#: a CPU this busy (share of what it could use) counts as saturated
SATURATED = 0.9
#: a machine shared by client and members this busy in all counts as full
SHARED_BUSY = 0.75


def client_bound(data: DatabaseData) -> str | None:
    """Why the client, not the database, limited throughput; None if it did not.

    The rule, from both sides' average CPU over the seconds requests completed
    in: the load generator used at least as much CPU as all the members on
    its machine together, and either its engine threads were busy (90% of
    what they can use) or — on a machine it shares with the members, the
    embedded default — that machine's cores were 75% busy in all. A remote
    client shares no cores with the members; only its own threads count."""
    load = data.record.load
    client = _in_window(data.client, data)
    cores = data.client_cores
    if load is None or client is None or not cores:
        return None
    served = served_rate(data)
    if served is not None and served[1] >= SERVED * served[0]:
        return None  # an open loop that kept up: its rate, not the client, set throughput
    done = client["requests_done"]
    active = client[done.diff().fillna(done) > 0]
    if active.empty:
        return None
    begin, end = float(active["t"].min()) - 1.0, float(active["t"].max())
    client_cpu = float(active["cpu_percent"].mean())
    members = 0.0
    if data.shared_host:
        for frame in data.servers:
            busy = frame[(frame["t"] > begin) & (frame["t"] <= end + 0.5)]
            members += float(busy["cpu_percent"].mean()) if len(busy) else 0.0
    threads = load.workers or 1
    threads_busy = client_cpu >= SATURATED * 100.0 * min(threads, cores)
    machine_busy = data.shared_host and client_cpu + members >= SHARED_BUSY * 100.0 * cores
    if client_cpu < members or not (threads_busy or machine_busy):
        return None
    if data.shared_host:
        where = (
            f"it shared {cores} cores with the members and used {client_cpu:.0f}% CPU"
            f" against their {members:.0f}% (averages while requests completed)"
        )
    else:
        where = f"it averaged {client_cpu:.0f}% CPU with {threads} engine thread(s)"
    return (
        f"the client was the bottleneck: {where}, so throughput understates what the"
        " database can do; run the load from another machine or give it more cores"
    )
