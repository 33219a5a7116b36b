"""Reading a history: every run's figures from its Parquet files (old runs
converted from their summaries), through DuckDB, embedded — no server.

Files in a bucket are read by DuckDB through the fsspec file system registered
with it (``duckdb.register_filesystem``): the same credentials and endpoint
(``AWS_ENDPOINT_URL``) as ``dbtester publish``, and no extension to download.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from dbtester.analyze.stats import Estimate, estimate
from dbtester.history.source import Run, Source

__all__ = ["History", "Reader", "RunFigures", "load_history"]


@dataclass(frozen=True)
class RunFigures:
    """One database in one run: its version and each metric's estimate over its trials."""

    run_id: str
    started_unix: float
    database: str
    kind: str
    version: str
    values: dict[str, tuple[float, ...]]  # metric -> one value per trial

    def estimate(self, metric: str) -> Estimate | None:
        found = self.values.get(metric)
        return estimate(found) if found else None

    @property
    def started(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.started_unix, tz=dt.UTC)


@dataclass(frozen=True)
class History:
    """Every run found, oldest first, one entry per run and database."""

    source: str
    runs: tuple[RunFigures, ...]
    converted: int  # runs read from their summaries (written before Parquet)
    #: run id -> the folder (in the source) that holds its result.json
    roots: Mapping[str, str] = field(default_factory=dict)

    def databases(self) -> list[str]:
        return sorted({r.database for r in self.runs})

    def of(self, database: str) -> list[RunFigures]:
        return [r for r in self.runs if r.database == database]

    def measured(self, metrics: Sequence[str]) -> tuple[str, ...]:
        """Those of ``metrics`` some run has a value for, in their order."""
        return tuple(m for m in metrics if any(r.values.get(m) for r in self.runs))


Reader = Literal["fetch", "duckdb"]


def load_history(
    source: Source,
    *,
    databases: Sequence[str] = (),
    since: dt.date | None = None,
    reader: Reader = "fetch",
) -> History:
    """Every run under ``source``, optionally only ``databases`` and runs on or
    after ``since``. From a bucket, ``fetch`` downloads the figures files
    concurrently (fsspec) and DuckDB queries them in memory; ``duckdb`` lets
    DuckDB open each file through the fsspec file system registered with it,
    one after another (slower: benchmarks/history_scale.py measures both)."""
    runs = source.runs()
    connection = duckdb.connect()
    try:
        connection.execute("SET enable_progress_bar = false")  # the table is the output
        if source.protocol and reader == "duckdb":
            connection.register_filesystem(source.fs)
        old = [r for r in runs if not r.figures]
        converted = {r.root: source.converted(r) for r in old}
        fetch = bool(source.protocol) and reader == "fetch"
        rows = _query(connection, source, runs, list(converted.values()), databases, since, fetch)
    finally:
        connection.close()
    roots = {run_id: r.root for r in runs for run_id in r.run_ids}
    for root, table in converted.items():
        roots.update((str(run_id), root) for run_id in table.column("run_id").unique().to_pylist())
    return History(source.url, tuple(_group(rows)), len(old), roots)


def _query(
    connection: duckdb.DuckDBPyConnection,
    source: Source,
    runs: Sequence[Run],
    converted: Sequence[pa.Table],
    databases: Sequence[str],
    since: dt.date | None,
    fetch: bool,
) -> list[tuple[Any, ...]]:
    paths = [f for r in runs for f in r.figures if _wanted(f, databases)]
    files = [] if fetch else [source.url_of(f) for f in paths]
    parts = []
    columns = "run_id, started_unix, database, kind, version, trial, metric, value"
    if fetch and paths:
        connection.register("fetched", _fetched(source, paths))
        parts.append(f"SELECT {columns} FROM fetched")
    if files:
        # the partition columns database and date come from the paths
        parts.append(
            f"SELECT {columns} FROM read_parquet($files, hive_partitioning = true,"
            " hive_types = {'database': VARCHAR, 'date': VARCHAR})"
        )
    if converted:
        connection.register("converted", pa.concat_tables(converted))
        parts.append(f"SELECT {columns} FROM converted")
    if not parts:
        return []
    where = ["true"]
    params: dict[str, object] = {"files": files} if files else {}
    if databases:
        where.append("database IN (SELECT unnest($databases))")
        params["databases"] = list(databases)
    if since is not None:
        where.append("started_unix >= $since")
        params["since"] = dt.datetime.combine(since, dt.time(), tzinfo=dt.UTC).timestamp()
    # one row per run, database and metric: its values in trial order
    sql = (
        "SELECT started_unix, run_id, database, any_value(kind), any_value(version), metric,"
        f" list(value ORDER BY trial) FROM ({' UNION ALL '.join(parts)})"
        f" WHERE {' AND '.join(where)} GROUP BY started_unix, run_id, database, metric"
        " ORDER BY started_unix, run_id, database, metric"
    )
    return connection.execute(sql, params).fetchall()


def _partition(path: str, key: str) -> str | None:
    """The value of Hive partition ``key`` in ``path`` (``.../key=value/...``)."""
    for part in path.split("/"):
        name, sep, value = part.partition("=")
        if sep and name == key:
            return value
    return None


def _wanted(path: str, databases: Sequence[str]) -> bool:
    """Partition pruning: a file of another database is not read at all."""
    return not databases or _partition(path, "database") in databases


def _fetched(source: Source, paths: Sequence[str]) -> pa.Table:
    """The figures files, downloaded concurrently, with their partition column."""
    blobs: dict[str, bytes] = source.fs.cat(list(paths))
    tables = []
    for path, blob in blobs.items():
        table = pq.read_table(pa.BufferReader(blob))
        database = [_partition(path, "database") or ""] * table.num_rows
        tables.append(table.append_column("database", pa.array(database, pa.string())))
    return pa.concat_tables(tables)


def _group(rows: Sequence[tuple[Any, ...]]) -> list[RunFigures]:
    """Consecutive rows of one run and database into one :class:`RunFigures`."""
    found: list[RunFigures] = []
    for started, run_id, database, kind, version, metric, values in rows:
        last = found[-1] if found else None
        if last is None or (last.run_id, last.database, last.started_unix) != (
            run_id,
            database,
            started,
        ):
            last = RunFigures(
                str(run_id), float(started), str(database), str(kind), str(version), {}
            )
            found.append(last)
        last.values[str(metric)] = tuple(float(v) for v in values)
    return found
