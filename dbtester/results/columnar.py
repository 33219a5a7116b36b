"""The raw data and figures of a run as Parquet, for ``dbtester history`` and
for any engine that reads Parquet (DuckDB, Spark, Trino, BigQuery).

Three tables, each partitioned Hive-style by database id and the run's UTC
date, so that a query over many runs in a bucket can skip whole folders::

    DIR/parquet/figures/database=<id>/date=<YYYY-MM-DD>/<run-id>.parquet
    DIR/parquet/requests/database=<id>/date=<YYYY-MM-DD>/<run-id>.parquet
    DIR/parquet/series/database=<id>/date=<YYYY-MM-DD>/<run-id>.parquet

Every row names its run (``run_id``, ``started_unix``), database (``kind``,
``version``) and ``trial`` (1 for a database that ran once); the partition
columns ``database`` and ``date`` come from the path. ``figures`` holds one
row per trial and table row (the numbers ``result.json`` summarises),
``requests`` one row per request (``client-latency.npz``), ``series`` one row
per sample and column of the per-second metrics files (long form,
``source`` is ``client``, ``client-<i>`` for load host *i*, or
``server-<i>``). The JSON and CSV files stay what they were:
these are written beside them, from the same records.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dbtester.results.model import DatabaseSummary, FigureValue, RunSummary
from dbtester.results.requests import Records

__all__ = [
    "FIGURES_SCHEMA",
    "PARTITIONS",
    "TABLES",
    "RunIdentity",
    "figure_rows",
    "figures_table",
    "identity",
    "requests_table",
    "series_table",
    "write_table",
]

#: the tables below ``DIR/parquet/``
TABLES = ("figures", "requests", "series")
#: the Hive partition keys, in path order
PARTITIONS = ("database", "date")

_FIGURES_COLUMNS: dict[str, pa.DataType] = {
    "run_id": pa.string(),
    "started_unix": pa.float64(),
    "database": pa.string(),
    "kind": pa.string(),
    "version": pa.string(),
    "trial": pa.int32(),
    "metric": pa.string(),
    "value": pa.float64(),
}
FIGURES_SCHEMA = pa.schema(_FIGURES_COLUMNS)


@dataclass(frozen=True)
class RunIdentity:
    """What every row of one database's tables says about where it came from."""

    run_id: str
    started_unix: float
    database: str
    kind: str
    version: str

    @property
    def date(self) -> str:
        """The run's UTC date: the second partition key."""
        moment = dt.datetime.fromtimestamp(self.started_unix, tz=dt.UTC)
        return moment.date().isoformat()


def _number(value: FigureValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # "-" and text cells are not figures
    return float(value) if math.isfinite(value) else None


def figure_rows(summary: RunSummary, database: DatabaseSummary) -> Iterator[tuple[int, str, float]]:
    """(trial, metric, value) of every numeric figure: each trial's own when
    the database ran 2+ trials, else the single run's."""
    trials = database.trial_figures or (database.figures,)
    for number, figures in enumerate(trials, start=1):
        for metric, value in figures.items():
            if (found := _number(value)) is not None:
                yield number, metric, found


def identity(summary: RunSummary, database: DatabaseSummary) -> RunIdentity:
    return RunIdentity(
        summary.run_id, summary.started_unix, database.id, database.kind, database.version
    )


def figures_table(summary: RunSummary, database: DatabaseSummary) -> pa.Table:
    """One database's figures in ``summary``, one row per trial and metric."""
    rows = list(figure_rows(summary, database))
    who = identity(summary, database)
    columns: dict[str, list[Any]] = {
        "run_id": [who.run_id] * len(rows),
        "started_unix": [who.started_unix] * len(rows),
        "database": [who.database] * len(rows),
        "kind": [who.kind] * len(rows),
        "version": [who.version] * len(rows),
        "trial": [t for t, _, _ in rows],
        "metric": [m for _, m, _ in rows],
        "value": [v for _, _, v in rows],
    }
    return pa.Table.from_pydict(columns, schema=FIGURES_SCHEMA)


def _identity_columns(who: RunIdentity, trial: int, size: int) -> dict[str, Any]:
    # pa.repeat fills the column in C: a Python list of 3,000,000 copies of
    # the run id took about a second per column
    return {
        "run_id": _repeat(who.run_id, size),
        "started_unix": pa.array(np.full(size, who.started_unix)),
        "kind": _repeat(who.kind, size),
        "version": _repeat(who.version, size),
        "trial": pa.array(np.full(size, trial, dtype=np.int32)),
    }


def _repeat(text: str, size: int) -> pa.Array[Any]:
    # One value for every row: a dictionary of one entry, which Parquet keeps
    # as such (readers see text), where 3,000,000 copies were made and then
    # dictionary-encoded again by the writer.
    return pa.DictionaryArray.from_arrays(np.zeros(size, np.int32), pa.array([text]))


def requests_table(who: RunIdentity, trials: Sequence[tuple[int, Records]]) -> pa.Table:
    """Every request of every trial; ``code`` is the outcome's name."""
    parts = []
    for trial, records in trials:
        codes = pa.DictionaryArray.from_arrays(
            records.code.astype(np.int32), pa.array(records.codes, pa.string())
        )
        columns = _identity_columns(who, trial, len(records))
        columns.update(
            due_ns=pa.array(records.due_ns),
            latency_ns=pa.array(records.latency_ns),
            service_ns=pa.array(records.service_ns),
            code=codes,
            step=pa.array(records.step),
        )
        parts.append(pa.table(columns))
    return pa.concat_tables(parts) if parts else pa.table({})


def series_table(who: RunIdentity, trials: Sequence[tuple[int, str, pd.DataFrame]]) -> pa.Table:
    """Every per-second sample, long form: (trial, source, unix_ms, column, value)."""
    parts = []
    for trial, source, frame in trials:
        long = frame.melt(id_vars=["unix_ms"], var_name="column", value_name="value")
        columns = _identity_columns(who, trial, len(long))
        columns.update(
            source=_repeat(source, len(long)),
            unix_ms=pa.array(long["unix_ms"].to_numpy(dtype=np.int64)),
            column=pa.array(long["column"].astype(str).tolist(), pa.string()),
            value=pa.array(long["value"].to_numpy(dtype=float)),
        )
        parts.append(pa.table(columns))
    return pa.concat_tables(parts) if parts else pa.table({})


def write_table(path: Path, table: pa.Table) -> None:
    """Write ``table`` whole or not at all (a reader never finds half a file).
    The partition columns live in the path only: Spark refuses a file that
    repeats them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    kept = table.drop_columns([c for c in PARTITIONS if c in table.column_names])
    # Dictionary pages for the text columns only (a handful of distinct values
    # each): tried on the numeric ones too, as by default, they are built and
    # then dropped for too many distinct values, which doubled the write time
    # of 3,000,000 requests.
    text = [
        f.name for f in kept.schema if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)
    ]
    # Integer columns (times, latencies, steps) delta-encoded: 3,000,000
    # requests wrote in 0.45 s against 0.81 s plain, and 11% smaller.
    integers = {f.name: "DELTA_BINARY_PACKED" for f in kept.schema if pa.types.is_integer(f.type)}
    pq.write_table(
        kept,
        temporary,
        compression="zstd",
        use_dictionary=text,  # type: ignore[arg-type]  # a list of columns; the stubs say bool
        column_encoding=integers or None,
    )
    temporary.replace(path)
