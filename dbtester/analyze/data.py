"""Read a results directory's raw data: only saved files, never live state, so
any old run can be analysed again (``dbtester analyze DIR``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dbtester.errors import DbtesterError
from dbtester.load.records import Records

__all__ = ["DatabaseData", "RunData", "load_run"]


@dataclass
class DatabaseData:
    id: str
    label: str
    record: dict[str, Any]  # run.json
    records: Records | None  # every request (client-latency.npz)
    client: pd.DataFrame | None  # client-metrics.csv
    servers: list[pd.DataFrame]  # server-<i>-metrics.csv, t = seconds since load start

    @property
    def load_start(self) -> float:
        load = self.record.get("load") or {}
        return float(load.get("started_unix") or self.record.get("started_unix") or 0.0)

    @property
    def shared_host(self) -> bool:
        """All members on one machine: its disk and network are counted once."""
        return bool(self.record.get("embedded"))


@dataclass
class RunData:
    directory: Path
    title: str
    description: str
    databases: list[DatabaseData]
    config: dict[str, Any]


def _read_csv(path: Path) -> pd.DataFrame | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError):
        return None
    return frame if len(frame) else None


def _member_index(path: Path) -> int:
    return int(path.name.split("-")[1])


def _load_database(directory: Path, db_id: str, label: str) -> DatabaseData | None:
    folder = directory / db_id
    run_file = folder / "run.json"
    if not run_file.exists():
        return None
    record = json.loads(run_file.read_text())
    latency = folder / "client-latency.npz"
    records = Records.load(latency) if latency.exists() else None
    data = DatabaseData(db_id, label, record, records, _read_csv(folder / "client-metrics.csv"), [])
    start = data.load_start
    offsets = {m["index"]: m.get("clock_offset_s", 0.0) for m in record.get("members", [])}
    for path in sorted(
        folder.glob("server-*-metrics.csv"), key=lambda p: int(p.name.split("-")[1])
    ):
        frame = _read_csv(path)
        if frame is None:
            continue
        index = int(path.name.split("-")[1])
        # Agent clock -> controller clock, then seconds since the load started.
        frame["t"] = frame["unix_ms"] / 1000.0 - offsets.get(index, 0.0) - start
        frame["member"] = index
        data.servers.append(frame)
    if data.client is not None:
        data.client["t"] = data.client["unix_ms"] / 1000.0 - start
    return data


def load_run(directory: Path) -> RunData:
    config_path = directory / "config.yaml"
    if not config_path.exists():
        raise DbtesterError(f"{directory} is not a dbtester results directory (no config.yaml)")
    config = yaml.safe_load(config_path.read_text()) or {}
    databases = []
    for db in config.get("databases", []):
        label = db.get("description") or db["id"]
        loaded = _load_database(directory, db["id"], label)
        if loaded is not None:
            databases.append(loaded)
    if not databases:
        raise DbtesterError(f"{directory} holds no database results (no <db-id>/run.json)")
    return RunData(
        directory, config.get("title", ""), config.get("description", ""), databases, config
    )
