"""Reading and writing a results directory: the one place its files are opened.

Writers take typed records; readers check each file's schema version
(upgrading older ones, refusing newer ones) and name the file whenever
something is missing or corrupt (:class:`~dbtester.errors.ResultsError`,
exit 2).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import yaml
from pydantic import BaseModel, ValidationError

from dbtester.errors import ResultsError
from dbtester.results.layout import DatabaseLayout, ResultsLayout
from dbtester.results.metrics import CLIENT_COLUMNS, SERVER_COLUMNS, read_metrics
from dbtester.results.records import DatabaseRecord, RunSummary
from dbtester.results.requests import Records
from dbtester.results.schema import upgrade

__all__ = ["CaseInfo", "DatabaseResults", "ResultsDir", "RunResults"]

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class CaseInfo:
    """What the analysis needs of the test case that ran: its title and
    description, and the databases in order with their column labels."""

    title: str
    description: str
    databases: tuple[tuple[str, str], ...]  # (id, label)


@dataclass(frozen=True)
class DatabaseResults:
    """Everything saved for one database (None / empty where nothing was)."""

    id: str
    label: str
    record: DatabaseRecord
    requests: Records | None
    client: pd.DataFrame | None  # client-metrics.csv
    servers: tuple[tuple[int, pd.DataFrame], ...]  # (member index, server metrics)


@dataclass(frozen=True)
class RunResults:
    directory: Path
    case: CaseInfo
    summary: RunSummary | None
    databases: tuple[DatabaseResults, ...]


class ResultsDir:
    """A results directory on disk: ``ResultsDir(path).load()`` reads it all."""

    def __init__(self, root: Path) -> None:
        self.layout = ResultsLayout(root)

    @property
    def root(self) -> Path:
        return self.layout.root

    def database(self, db_id: str) -> DatabaseLayout:
        return self.layout.database(db_id)

    # ------------------------------------------------------------------ writing

    def write_config(self, raw: Mapping[str, Any]) -> None:
        _write_text(self.layout.config, yaml.safe_dump(dict(raw), sort_keys=False))

    def write_summary(self, summary: RunSummary) -> None:
        _write_json(self.layout.summary, summary.to_json())

    def write_record(self, record: DatabaseRecord) -> None:
        path = self.database(record.id).record
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, record.to_json())

    def write_rendered(self, table: str, table_csv: str, readme: str) -> None:
        _write_text(self.layout.table, table)
        _write_text(self.layout.table_csv, table_csv)
        _write_text(self.layout.readme, readme)

    # ------------------------------------------------------------------ reading

    def read_case(self) -> CaseInfo:
        path = self.layout.config
        if not path.is_file():
            raise ResultsError(self.root, "not a dbtester results directory (no config.yaml)")
        try:
            raw = yaml.safe_load(_read_text(path)) or {}
        except yaml.YAMLError as exc:
            raise ResultsError(path, f"not valid YAML: {_first_line(exc)}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("databases", []), list):
            raise ResultsError(path, "not a test case (expected a mapping with databases)")
        databases = []
        for entry in raw.get("databases", []):
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise ResultsError(path, "a database entry has no id")
            label = entry.get("description") or entry["id"]
            databases.append((entry["id"], str(label)))
        title, description = str(raw.get("title", "")), str(raw.get("description", ""))
        return CaseInfo(title, description, tuple(databases))

    def read_summary(self) -> RunSummary | None:
        path = self.layout.summary
        return _read_record(path, RunSummary) if path.exists() else None

    def read_record(self, db_id: str) -> DatabaseRecord | None:
        path = self.database(db_id).record
        return _read_record(path, DatabaseRecord) if path.exists() else None

    def read_requests(self, db_id: str) -> Records | None:
        path = self.database(db_id).requests
        return Records.load(path) if path.exists() else None

    def read_database(self, db_id: str, label: str) -> DatabaseResults | None:
        """One database's saved data; None when it never ran (no run.json)."""
        record = self.read_record(db_id)
        if record is None:
            return None
        layout = self.database(db_id)
        servers = []
        for index, path in layout.server_metric_files():
            frame = read_metrics(path, SERVER_COLUMNS)
            if frame is not None:
                servers.append((index, frame))
        return DatabaseResults(
            db_id,
            label,
            record,
            self.read_requests(db_id),
            read_metrics(layout.client_metrics, CLIENT_COLUMNS),
            tuple(servers),
        )

    def load(self) -> RunResults:
        """The whole directory: every database that ran, in the test case's order."""
        case = self.read_case()
        summary = self.read_summary()
        databases = [self.read_database(db_id, label) for db_id, label in case.databases]
        found = tuple(db for db in databases if db is not None)
        if not found:
            raise ResultsError(self.root, "holds no database results (no <db-id>/run.json)")
        return RunResults(self.root, case, summary, found)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ResultsError(path, "not UTF-8 text") from None
    except OSError as exc:
        raise ResultsError(path, f"cannot read: {exc.strerror}") from None


def _read_record(path: Path, model: type[R]) -> R:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise ResultsError(path, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ResultsError(path, "not valid JSON: nested too deeply") from None
    current = upgrade(data, path)
    try:
        return model.model_validate(current)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "(top)"
        count = exc.error_count()
        more = f" (and {count - 1} more)" if count > 1 else ""
        raise ResultsError(path, f"{where}: {problem['msg']}{more}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` whole or not at all: a reader never finds half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    _write_text(path, json.dumps(data, indent=2) + "\n")
