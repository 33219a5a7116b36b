"""A database's saved data made ready for analysis: server and client samples
put on the controller's clock, in seconds since the load started. Pure: it
takes what :mod:`dbtester.results` read and copies what it changes."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dbtester.results import (
    DatabaseRecord,
    InformerLags,
    LockHolds,
    Records,
    TrialResults,
    WatchEvents,
)

__all__ = ["DatabaseData", "prepare"]


@dataclass(frozen=True)
class DatabaseData:
    id: str
    label: str
    record: DatabaseRecord
    records: Records | None  # every request
    client: pd.DataFrame | None  # client samples, with t (seconds since the load start)
    servers: list[pd.DataFrame]  # server samples per member, with t and member
    client_cores: int | None = None  # cores of the machine the load ran on
    trial: int = 1
    watch: WatchEvents | None = None  # type: watch: what the watchers saw
    #: each load host's samples, with t (``load_hosts:``; ``client`` is None then)
    load_hosts: tuple[pd.DataFrame, ...] = ()
    #: each companion server's samples by its name (kine's PostgreSQL), with t and member
    companions: tuple[tuple[str, pd.DataFrame], ...] = ()
    #: type: kubernetes: its informers' event lags (None without informers)
    informer_lags: InformerLags | None = None
    #: type: lock: every acquisition (None for the other types)
    lock_holds: LockHolds | None = None

    @property
    def load_start(self) -> float:
        return self.record.load_start

    @property
    def shared_host(self) -> bool:
        """All members on one machine: its disk and network are counted once."""
        return self.record.embedded


def prepare(
    db_id: str, label: str, db: TrialResults, client_cores: int | None = None
) -> DatabaseData:
    """One run of a database, ready for :func:`dbtester.analyze.figures.compute`."""
    start = db.record.load_start
    offsets = {m.index: m.clock_offset_s for m in db.record.members}

    def on_our_clock(index: int, samples: pd.DataFrame) -> pd.DataFrame:
        frame = samples.copy()
        # Agent clock -> controller clock, then seconds since the load started.
        frame["t"] = frame["unix_ms"] / 1000.0 - offsets.get(index, 0.0) - start
        frame["member"] = index
        return frame

    servers = [on_our_clock(index, samples) for index, samples in db.servers]
    companions = tuple((name, on_our_clock(i, samples)) for i, name, samples in db.companions)
    client = None
    if db.client is not None:
        client = db.client.copy()
        client["t"] = client["unix_ms"] / 1000.0 - start
    hosts = []
    for _, samples in db.load_hosts:  # already moved onto the controller's clock
        frame = samples.copy()
        frame["t"] = frame["unix_ms"] / 1000.0 - start
        hosts.append(frame)
    return DatabaseData(
        db_id,
        label,
        db.record,
        db.requests,
        client,
        servers,
        client_cores,
        db.trial,
        db.watch,
        tuple(hosts),
        companions,
        db.informer_lags,
        db.lock_holds,
    )
