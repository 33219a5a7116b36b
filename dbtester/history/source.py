"""Where a history lives: a local results folder or a bucket prefix
(``gs://``, ``s3://``, ``file://``), as an fsspec file system, and the runs
found under it.

A run is a directory holding ``result.json``. One written since the Parquet
files exist has ``parquet/figures/...`` beside it; an older one has only its
summary, which is read through the results records (upgraded to the current
schema) and converted to the same rows in memory.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec  # type: ignore[import-untyped]
import pyarrow as pa

from dbtester.errors import BadInputError
from dbtester.results import ResultsDir, ResultsLayout, RunSummary, columnar

__all__ = ["Run", "Source", "open_source"]

_SUMMARY = ResultsLayout(Path("/")).summary.name
_PARQUET = ResultsLayout(Path("/")).parquet_root.name


@dataclass(frozen=True)
class Run:
    """One run found under a source: its folder and its figures' Parquet files
    (none for a run from before they were written)."""

    root: str  # the fsspec path of the run's folder
    figures: tuple[str, ...]

    @property
    def run_ids(self) -> set[str]:
        """The run ids its figures files name (``<run-id>.parquet``)."""
        return {posixpath.splitext(posixpath.basename(f))[0] for f in self.figures}


@dataclass(frozen=True)
class Source:
    """A history's root: ``fs`` and ``root`` (a path in it), ``protocol`` the
    URL scheme DuckDB sees its files under (``""`` for local files)."""

    url: str
    fs: Any  # fsspec.AbstractFileSystem (untyped)
    root: str
    protocol: str

    def url_of(self, path: str) -> str:
        """``path`` as DuckDB opens it: local, or scheme://path."""
        return f"{self.protocol}://{path}" if self.protocol else path

    def runs(self) -> list[Run]:
        """Every run below the root, by folder."""
        files = self._find()
        found: dict[str, list[str]] = {}
        for path in files:
            head, name = posixpath.split(path)
            if name == _SUMMARY:
                found.setdefault(head, [])
        marker = f"/{_PARQUET}/figures/"
        for path in files:
            if marker in path and path.endswith(".parquet"):
                run = path.split(marker, 1)[0]
                if run in found:
                    found[run].append(path)
        return [Run(root, tuple(sorted(files))) for root, files in sorted(found.items())]

    def _find(self) -> list[str]:
        """The files below the root that matter. A bucket is listed flat (one
        request per 1,000 keys); a local folder is walked without descending
        into runs' raw data (a run's requests and series are most of its files)."""
        if self.protocol:
            try:
                return [str(p).rstrip("/") for p in self.fs.find(self.root)]
            except FileNotFoundError:
                return []
        return _local_files(self.root)

    def summary(self, root: str) -> RunSummary | None:
        """The result.json of the run in folder ``root``, upgraded to the
        current schema (None when it is missing)."""
        with tempfile.TemporaryDirectory(prefix="dbtester-history-") as scratch:
            local = Path(scratch)
            try:
                self.fs.get(posixpath.join(root, _SUMMARY), str(local / _SUMMARY))
            except FileNotFoundError:
                return None
            return ResultsDir(local).read_summary()

    def converted(self, run: Run) -> pa.Table:
        """An old run's figures (no Parquet): its result.json read through the
        results records, upgraded to the current schema."""
        summary = self.summary(run.root)
        if summary is None:
            return columnar.FIGURES_SCHEMA.empty_table()
        tables = [columnar.figures_table(summary, db) for db in summary.databases]
        if not tables:
            return columnar.FIGURES_SCHEMA.empty_table()
        return pa.concat_tables(tables)


def _local_files(root: str) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(root):
        if _SUMMARY in files:
            found.append(posixpath.join(folder, _SUMMARY))
            figures = Path(folder) / _PARQUET / "figures"
            found.extend(p.as_posix() for p in figures.glob("*/*/*.parquet"))
            dirs.clear()  # a run holds no other run
    return found


def open_source(url: str) -> Source:
    """A local folder (a path or ``file://``) or a bucket prefix (``gs://``, ``s3://``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        path = Path(url).resolve()
        if not path.is_dir():
            raise BadInputError(f"history source {url!r} is not a folder")
        return Source(url, fsspec.filesystem("file"), path.as_posix(), "")
    if scheme == "file":
        return open_source(rest or "/")
    if scheme not in ("gs", "s3"):
        raise BadInputError(
            f"unsupported history source {url!r}; use a folder, file://, gs:// or s3://"
        )
    if not rest.strip("/"):
        raise BadInputError(f"history source {url!r} names no bucket")
    return Source(url, fsspec.filesystem(scheme), rest.strip("/"), scheme)
