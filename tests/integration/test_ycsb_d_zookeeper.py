"""YCSB D (95% reads, 5% inserts, `latest`) on a 3-member ZooKeeper.

`latest` draws only the load phase's keys and acknowledged inserts, and a
mixed workload deletes nothing, yet reads found no key (NoNode): every
insert had succeeded, and a 1-member ZooKeeper never did it. ZooKeeper
serves a read from the member the session is connected to, which may not
have applied a write the leader already committed (sequential consistency).
So: with `consistency: linearizable` (the default) each read syncs that
member with the leader first, and no read is stale; with `serializable`,
stale reads are allowed, and the table names them (STALE-READS, a note),
not as errors.

The first tests judge the analysis on made-up records; the last two run
ZooKeeper 3.8.0 (a few seconds of load each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dbtester.analyze.data import DatabaseData
from dbtester.analyze.figures import STALE_ROW, Figures, compute, table_rows
from dbtester.databases import get_kind
from dbtester.results import OPERATIONS, DatabaseRecord, LoadWindow, Records
from tests.support.cases import database, make_case, write_case

START = 1_800_000_000.0
READ, INSERT = OPERATIONS.index("read"), OPERATIONS.index("insert")
ZOOKEEPER = "3.8.0"


def _figures(
    ops: list[int],
    codes: list[int],
    *,
    kind: str = "zookeeper",
    workload: dict[str, Any] | None = None,
) -> Figures:
    n = len(ops)
    due = (START * 1e9 + np.arange(n) * 1e7).astype(np.int64)  # 100 a second
    latency = np.full(n, 2_000_000, np.int64)
    records = Records(
        due,
        latency,
        latency,
        np.array(codes, np.uint8),
        np.zeros(n, np.uint16),
        ["ok", get_kind(kind).not_found or "NoNode", "ConnectionLoss"],
        np.array(ops, np.uint8),
    )
    record = DatabaseRecord(
        run_id="run",
        database={
            "id": "zk",
            "kind": kind,
            "version": ZOOKEEPER,
            "workload": workload if workload is not None else {"type": "mixed"},
        },
        started_unix=START,
        load=LoadWindow(started_unix=START, ended_unix=START + n / 100, workers=1, cpu_seconds=1.0),
        embedded=True,
        not_found_outcome=get_kind(kind).not_found,  # as the run records it
    )
    return compute(DatabaseData("zk", "zk", record, records, None, []))


# 95 reads and 5 inserts; 3 of the reads found no key
OPS = [INSERT if i % 20 == 0 else READ for i in range(100)]
CODES = [1 if i in (41, 42, 77) else 0 for i in range(100)]


def test_serializable_stale_reads_are_named_and_are_not_errors() -> None:
    figures = _figures(OPS, CODES, workload={"type": "mixed", "consistency": "serializable"})
    v = figures.values
    assert v[STALE_ROW] == 3
    assert v["CLIENT-ERROR-COUNT"] == 0
    assert STALE_ROW in table_rows([figures])
    notes = " ".join(figures.notes)
    assert "3 reads were stale" in notes and "serializable allows them" in notes
    assert "requests failed" not in notes  # not reported as a failure


def test_linearizable_stale_reads_are_named_and_are_errors() -> None:
    figures = _figures(OPS, CODES)  # consistency: linearizable, the default
    assert figures.values[STALE_ROW] == 3
    assert figures.values["CLIENT-ERROR-COUNT"] == 3
    notes = " ".join(figures.notes)
    assert "3 requests failed (stale-read 3)" in notes
    assert "must see every acknowledged write" in notes and "NoNode 3" not in notes


def test_no_stale_read_is_claimed_without_proof() -> None:
    # An insert failed: `latest` may pick its key, which was never created.
    codes = [2 if i == 20 else c for i, c in enumerate(CODES)]
    figures = _figures(OPS, codes)
    assert figures.values[STALE_ROW] == 0
    assert "NoNode 3" in " ".join(figures.notes)
    # Not a mixed workload, or not ZooKeeper: no such row.
    write = _figures(OPS, CODES, workload={"type": "write"})
    etcd = _figures(OPS, CODES, kind="etcd")
    assert STALE_ROW not in write.values and STALE_ROW not in etcd.values
    # A mixed ZooKeeper run without one says so: 0.
    assert _figures(OPS, [0] * 100).values[STALE_ROW] == 0


def test_a_nats_direct_get_that_finds_no_key_is_a_stale_read() -> None:
    """NATS's serializable reads are direct gets, which any replica answers:
    one that has not applied an insert answers key-not-found."""
    figures = _figures(
        OPS, CODES, kind="nats", workload={"type": "mixed", "consistency": "serializable"}
    )
    assert figures.values[STALE_ROW] == 3 and figures.values["CLIENT-ERROR-COUNT"] == 0
    assert "each found no key (key-not-found)" in " ".join(figures.notes)


# --------------------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def home(installed_home: Any) -> Path:
    return Path(installed_home("zookeeper", ZOOKEEPER))


def _run(
    home: Path, tmp_path: Path, consistency: str, requests: int
) -> tuple[dict[str, Any], Records, Path]:
    """YCSB D at test size on 3 members: its figures, records and results."""
    case = make_case(
        title=f"YCSB D on ZooKeeper, {consistency} reads",
        workload={
            "type": "mixed",
            "key_count": 500,
            "requests": requests,
            "value_size": 128,
            "read_proportion": 0.95,
            "update_proportion": 0.0,
            "insert_proportion": 0.05,
            "read_modify_write_proportion": 0.0,
            "request_distribution": "latest",
            "consistency": consistency,
            "clients": 40,
            "connections": 6,
            # stale reads are allowed with serializable: do not stop for them
            "max_error_rate": 0.2,
        },
        databases=[database("zookeeper-v3.8", "zookeeper", ZOOKEEPER, members=3)],
    )
    path = write_case(tmp_path / "case.yaml", case)
    out = tmp_path / "results"
    result = subprocess.run(
        [sys.executable, "-m", "dbtester", "run", "--no-charts", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "DBTESTER_HOME": str(home)},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (db,) = json.loads((out / "result.json").read_text())["databases"]
    records = Records.load(out / "zookeeper-v3.8" / "client-latency.npz")
    inserts = records.ops == INSERT
    assert inserts.any() and (records.code[inserts] == 0).all(), records.counts()
    return db["figures"], records, out


def _not_found(records: Records) -> int:
    """Reads that found no key."""
    if "NoNode" not in records.codes:
        return 0
    return int(((records.ops == READ) & (records.code == records.codes.index("NoNode"))).sum())


def test_linearizable_reads_sync_first_and_are_never_stale(home: Path, tmp_path: Path) -> None:
    """Before reads synced, 0 to 8 of 4,000 to 8,000 found no key (1 run in 8
    had none); 20,000 requests (about 5 s) make a miss unlikely."""
    figures, records, _ = _run(home, tmp_path, "linearizable", 20_000)
    assert _not_found(records) == 0, records.counts()
    assert figures[STALE_ROW] == 0
    assert figures["CLIENT-ERROR-COUNT"] == 0


def test_serializable_stale_reads_are_named_in_the_table(home: Path, tmp_path: Path) -> None:
    figures, records, out = _run(home, tmp_path, "serializable", 8000)
    stale = _not_found(records)
    assert figures[STALE_ROW] == stale
    assert figures["CLIENT-ERROR-COUNT"] == records.errors() - stale == 0
    table = (out / "summary.txt").read_text()
    readme = (out / "README.md").read_text()
    assert f"| {STALE_ROW} |" in " ".join(table.split())
    assert "requests failed" not in readme  # not a failure, and not a bare NoNode
    if stale:
        assert f"{stale:,} reads were stale" in readme
