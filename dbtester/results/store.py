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
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dbtester.errors import ResultsError
from dbtester.results.checked import CheckedOperations
from dbtester.results.files import check_unicode, present, read_regular_file
from dbtester.results.informers import InformerLags
from dbtester.results.layout import DatabaseLayout, ResultsLayout
from dbtester.results.locks import LockHolds
from dbtester.results.metrics import (
    CLIENT_COLUMNS,
    HOST_COLUMNS,
    SERVER_COLUMNS,
    STORAGE_COLUMNS,
    read_metrics,
)
from dbtester.results.model import DatabaseRecord, RunSummary
from dbtester.results.requests import Records
from dbtester.results.schema import upgrade
from dbtester.results.watch import WatchEvents
from dbtester.util.paths import SAFE_NAME

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CaseInfo", "DatabaseResults", "ResultsDir", "RunResults", "TrialResults"]

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class CaseInfo:
    """What the analysis needs of the test case that ran: its title and
    description, and the databases in order with their column labels."""

    title: str
    description: str
    databases: tuple[tuple[str, str], ...]  # (id, label)


@dataclass(frozen=True)
class TrialResults:
    """Everything saved for one run of one database (None / empty where
    nothing was): its only run, or one trial of a repeated one."""

    record: DatabaseRecord
    requests: Records | None
    client: pd.DataFrame | None  # client-metrics.csv
    servers: tuple[tuple[int, pd.DataFrame], ...]  # (member index, server metrics)
    #: what a watch load's watchers saw (watch-events.npz; None for others)
    watch: WatchEvents | None = None
    #: what the checked clients did (check-history.npz; None without check)
    check: CheckedOperations | None = None
    #: each load host's samples (client-<i>-metrics.csv; ``load_hosts:`` only)
    load_hosts: tuple[tuple[int, pd.DataFrame], ...] = ()
    #: (member index, name, samples) of each member's companion server
    #: (server-<i>-<name>-metrics.csv: kine's PostgreSQL)
    companions: tuple[tuple[int, str, pd.DataFrame], ...] = ()
    #: a Kubernetes load's informers' event lags (informer-lags.npz; None without)
    informer_lags: InformerLags | None = None
    #: a lock load's acquisitions (lock-holds.npz; None for the other types)
    lock_holds: LockHolds | None = None

    @property
    def trial(self) -> int:
        return self.record.trial or 1


@dataclass(frozen=True)
class DatabaseResults:
    """One database: every trial that ran, in order (one unless repeated)."""

    id: str
    label: str
    trials: tuple[TrialResults, ...]

    @property
    def passed(self) -> bool:
        return all(t.record.passed for t in self.trials)


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

    def database(self, db_id: str, trial: int | None = None) -> DatabaseLayout:
        return self.layout.database(db_id, trial)

    # ------------------------------------------------------------------ writing

    def write_config(self, raw: Mapping[str, Any]) -> None:
        _write_text(self.layout.config, yaml.safe_dump(dict(raw), sort_keys=False))

    def write_summary(self, summary: RunSummary) -> None:
        _write_json(self.layout.summary, summary.to_json())

    def write_record(self, record: DatabaseRecord) -> None:
        path = self.database(record.id, record.trial).record
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, record.to_json())

    def write_rendered(self, table: str, table_csv: str, readme: str, comparison: str) -> None:
        _write_text(self.layout.table, table)
        _write_text(self.layout.table_csv, table_csv)
        _write_text(self.layout.readme, readme)
        if comparison:
            _write_text(self.layout.comparison, comparison)
        else:
            self.layout.comparison.unlink(missing_ok=True)

    def write_columnar(self, results: RunResults, summary: RunSummary) -> list[Path]:
        """Each database's figures, requests and per-second series as Parquet
        (:mod:`dbtester.results.columnar`), beside the files they come from;
        returns the paths written."""
        # pyarrow (and pandas) on first use: most commands never write Parquet.
        from dbtester.results import columnar

        written = []
        by_id = {db.id: db for db in summary.databases}
        for database in results.databases:
            found = by_id.get(database.id)
            if found is None:
                continue
            who = columnar.identity(summary, found)
            tables = {
                "figures": columnar.figures_table(summary, found),
                "requests": columnar.requests_table(who, _trial_requests(database)),
                "series": columnar.series_table(who, _trial_series(database)),
            }
            for name, table in tables.items():
                if table.num_rows:
                    path = self.layout.parquet(name, database.id, who.date, who.run_id)
                    columnar.write_table(path, table)
                    written.append(path)
        return written

    def write_report(self, page: str) -> Path:
        """``report.html``; returns its path."""
        _write_text(self.layout.report, page)
        return self.layout.report

    # ------------------------------------------------------------------ reading

    def read_case(self) -> CaseInfo:
        path = self.layout.config
        if not path.is_file():
            raise ResultsError(self.root, "not a dbtester results directory (no config.yaml)")
        raw = _read_yaml(path) or {}
        if not isinstance(raw, dict) or not isinstance(raw.get("databases", []), list):
            raise ResultsError(path, "not a test case (expected a mapping with databases)")
        databases = []
        for entry in raw.get("databases", []):
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise ResultsError(path, "a database entry has no id")
            if not SAFE_NAME.fullmatch(entry["id"]):
                # It names a directory: never a path out of this one.
                raise ResultsError(path, f"database id {entry['id'][:80]!r} is not an id")
            label = entry.get("description") or entry["id"]
            databases.append((entry["id"], str(label)))
        if len({db_id for db_id, _ in databases}) != len(databases):
            raise ResultsError(path, "two databases have the same id")
        title, description = str(raw.get("title", "")), str(raw.get("description", ""))
        return CaseInfo(title, description, tuple(databases))

    def read_case_text(self) -> str:
        """config.yaml as written: the resolved test case, for the report."""
        return _read_text(self.layout.config, MAX_CONFIG_BYTES)

    def _check_rendered_paths(self) -> None:
        """What rendering writes can be written: a directory where a file goes
        (or a file where the charts go) is named before anything is computed."""
        layout = self.layout
        for path in (
            layout.summary,
            layout.table,
            layout.table_csv,
            layout.readme,
            layout.comparison,
            layout.report,
        ):
            if path.is_dir():
                raise ResultsError(path, "a directory where dbtester writes a file")
        if layout.charts.exists() and not layout.charts.is_dir():
            raise ResultsError(layout.charts, "not a directory: the charts go in it")

    def read_summary(self) -> RunSummary | None:
        path = self.layout.summary
        return _read_record(path, RunSummary) if present(path) else None

    def read_record(self, db_id: str, trial: int | None = None) -> DatabaseRecord | None:
        path = self.database(db_id, trial).record
        if not present(path):
            return None
        record = _read_record(path, DatabaseRecord)
        if record.trial != trial:
            raise ResultsError(path, f"says it is trial {record.trial}, found as trial {trial}")
        return record

    def read_requests(self, db_id: str, trial: int | None = None) -> Records | None:
        path = self.database(db_id, trial).requests
        return Records.load(path) if present(path) else None

    def trial_numbers(self, db_id: str) -> list[int | None]:
        """The trials saved for ``db_id``: ``[None]`` for a database that ran
        once (its files in ``<db-id>/``), else the numbers of its trial dirs."""
        if present(self.database(db_id).record):
            return [None]
        return list(self.database(db_id).trial_numbers())

    def read_trial(self, db_id: str, trial: int | None = None) -> TrialResults | None:
        """One run of one database; None when it never ran (no run.json)."""
        record = self.read_record(db_id, trial)
        if record is None:
            return None
        layout = self.database(db_id, trial)
        servers = []
        for index, path in layout.server_metric_files():
            frame = read_metrics(path, SERVER_COLUMNS, (*HOST_COLUMNS, *STORAGE_COLUMNS))
            if frame is not None:
                servers.append((index, frame))
        return TrialResults(
            record,
            self.read_requests(db_id, trial),
            read_metrics(layout.client_metrics, CLIENT_COLUMNS),
            tuple(servers),
            WatchEvents.load(layout.watch_events) if present(layout.watch_events) else None,
            CheckedOperations.load(layout.check_history) if present(layout.check_history) else None,
            tuple(
                (host.index, frame)
                for host in record.load_hosts
                if (frame := read_metrics(layout.load_host_metrics(host.index), CLIENT_COLUMNS))
                is not None
            ),
            tuple(
                (index, name, frame)
                for index, name, path in layout.companion_metric_files()
                if (frame := read_metrics(path, SERVER_COLUMNS)) is not None
            ),
            InformerLags.load(layout.informer_lags) if present(layout.informer_lags) else None,
            LockHolds.load(layout.lock_holds) if present(layout.lock_holds) else None,
        )

    def read_database(self, db_id: str, label: str) -> DatabaseResults | None:
        """One database's saved trials; None when none ran."""
        trials = [self.read_trial(db_id, k) for k in self.trial_numbers(db_id)]
        found = tuple(t for t in trials if t is not None)
        return DatabaseResults(db_id, label, found) if found else None

    def load(self) -> RunResults:
        """The whole directory: every database that ran, in the test case's order."""
        case = self.read_case()
        self._check_rendered_paths()
        summary = self.read_summary()
        databases = [self.read_database(db_id, label) for db_id, label in case.databases]
        found = tuple(db for db in databases if db is not None)
        if not found:
            raise ResultsError(self.root, "holds no database results (no <db-id>/run.json)")
        return RunResults(self.root, case, summary, found)


def _trial_requests(database: DatabaseResults) -> list[tuple[int, Records]]:
    return [(t.trial, t.requests) for t in database.trials if t.requests is not None]


def _trial_series(database: DatabaseResults) -> list[tuple[int, str, pd.DataFrame]]:
    found = []
    for t in database.trials:
        if t.client is not None:
            found.append((t.trial, "client", t.client))
        found.extend((t.trial, f"client-{i}", frame) for i, frame in t.load_hosts)
        found.extend((t.trial, f"server-{index}", frame) for index, frame in t.servers)
    return found


#: dbtester writes a few KB into config.yaml and the JSON files; far larger ones
#: are not its files, and reading them whole would only cost memory
MAX_CONFIG_BYTES = 1024 * 1024
MAX_JSON_BYTES = 64 * 1024 * 1024
_YAML_MAX_DEPTH = 64
_YAML_MAX_NODES = 100_000


def _read_text(path: Path, limit: int) -> str:
    data = read_regular_file(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultsError(path, "not UTF-8 text") from None


def _read_yaml(path: Path) -> Any:
    """config.yaml as plain data. dbtester writes it with ``yaml.safe_dump``:
    no anchors, aliases or tags, a few levels deep. Anything else is refused
    before it is built, so that no file can recurse or expand (aliases of
    aliases grow exponentially when printed)."""
    text = _read_text(path, MAX_CONFIG_BYTES)
    try:
        _check_yaml_events(text, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ResultsError(path, f"not valid YAML: {_first_line(exc)}") from None
    except (ValueError, TypeError, LookupError, AttributeError, ArithmeticError) as exc:
        # a scalar its implicit type cannot read (a date such as 2001-13-45)
        raise ResultsError(path, f"not valid YAML: {_first_line(exc)}") from None
    check_unicode(path, data)
    return data


def _check_yaml_events(text: str, path: Path) -> None:
    loader: Any = yaml.SafeLoader(text)  # PyYAML's parser is untyped
    depth = nodes = 0
    try:
        while loader.check_event():
            event: Any = loader.get_event()
            if isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            nodes += 1
            mark: Any = event.start_mark
            line = mark.line + 1
            if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
                raise ResultsError(
                    path, f"line {line}: YAML anchors and aliases are not dbtester's"
                )
            if getattr(event, "tag", None) not in (None, "!"):
                raise ResultsError(path, f"line {line}: YAML tags are not dbtester's")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > _YAML_MAX_DEPTH:
                    raise ResultsError(path, f"line {line}: nested too deeply")
            if nodes > _YAML_MAX_NODES:
                raise ResultsError(path, f"line {line}: too many values")
    finally:
        loader.dispose()


def _read_record(path: Path, model: type[R]) -> R:
    try:
        data = json.loads(_read_text(path, MAX_JSON_BYTES))
    except RecursionError:
        raise ResultsError(path, "not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of too many digits
        raise ResultsError(path, f"not valid JSON: {_first_line(exc)}") from None
    check_unicode(path, data)
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
    for target in (path, temporary):
        if target.is_dir():
            raise ResultsError(target, "a directory where dbtester writes a file")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    _write_text(path, json.dumps(data, indent=2) + "\n")
