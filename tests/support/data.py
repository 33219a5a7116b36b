"""Synthetic results for the unit tests: records, samples, trials and results
directories, on fixed clocks (nothing in them is timed)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from dbtester.analyze.data import DatabaseData
from dbtester.report.charts import STANDARD as CHARTS
from dbtester.report.readme import render_readme
from dbtester.results import (
    DatabaseRecord,
    LoadWindow,
    MemberRecord,
    Records,
    ResultsDir,
    Verification,
    WatchEvents,
)
from tests.conftest import ROOT

START = 1_800_000_000.0
DAY = 86400.0


def analysis_data(n: int = 100_000, seconds: float = 10.0) -> DatabaseData:
    rng = np.random.default_rng(1)
    due = (START * 1e9 + np.sort(rng.uniform(0, seconds * 1e9, n))).astype(np.int64)
    latency = rng.integers(1_000_000, 50_000_000, n).astype(np.int64)
    code = np.zeros(n, np.uint8)
    code[:10] = 1
    latency[:10] = 50_000  # refused connections answer fast: not a latency to report
    records = Records(due, latency, latency, code, np.zeros(n, np.uint16), ["ok", "UNAVAILABLE"])
    servers = []
    for m in range(3):
        frame = pd.DataFrame(
            {
                "unix_ms": [int((START + s) * 1000) for s in range(12)],
                "cpu_percent": [10.0 * (m + 1)] * 12,
                "rss_bytes": [100_000_000 * (m + 1)] * 12,
                "voluntary_ctxt_switches": [5] * 12,
                "nonvoluntary_ctxt_switches": [1] * 12,
                "read_bytes": [0] * 12,
                "write_bytes": [4096] * 12,
                "reads_completed": [1] * 12,
                "sectors_read": [8] * 12,
                "writes_completed": [2] * 12,
                "sectors_written": [16] * 12,
                "receive_bytes": [1000] * 12,
                "transmit_bytes": [2000] * 12,
                "data_dir_bytes": [1] * 12,
            }
        )
        frame["t"] = frame["unix_ms"] / 1000 - START
        frame["member"] = m
        servers.append(frame)
    record = DatabaseRecord(
        run_id="run",
        database={"id": "db", "kind": "etcd", "version": "3.5.17"},
        started_unix=START,
        load=LoadWindow(started_unix=START, ended_unix=START + seconds, workers=2, cpu_seconds=5.0),
        embedded=False,
        members=tuple(
            MemberRecord(index=m, host="h", agent="a", disk_usage_bytes=int(1e9 * (m + 1)))
            for m in range(3)
        ),
        verification=verified(n - 10, n - 10),
    )
    return DatabaseData("db", "db", record, records, None, servers)


def verified(found: int, expected: int) -> Verification:
    lost = max(0, expected - found)
    return Verification(
        attempted=expected,
        acknowledged=expected,
        failed=0,
        unknown=0,
        expected_min=expected,
        expected_max=expected,
        found=found,
        lost=lost,
        unexpected=0,
    )


def with_cpu(client: float, member: float, *, shared: bool, cores: int = 2, workers: int = 1):
    data = analysis_data()
    seconds = range(12)
    frame = pd.DataFrame(
        {
            "unix_ms": [int((START + s) * 1000) for s in seconds],
            "cpu_percent": [client] * 12,
            "rss_bytes": [1] * 12,
            "receive_bytes": [0] * 12,
            "transmit_bytes": [0] * 12,
            "requests_done": [1000 * (s + 1) for s in seconds],
            "errors": [0] * 12,
        }
    )
    frame["t"] = frame["unix_ms"] / 1000 - START
    servers = [server.assign(cpu_percent=member) for server in data.servers]
    record = data.record.model_copy(
        update={
            "embedded": shared,
            "load": data.record.load.model_copy(update={"workers": workers}),  # type: ignore[union-attr]
        }
    )
    return replace(data, client=frame, servers=servers, record=record, client_cores=cores)


def watch_events(tmp_path: Path) -> WatchEvents:
    # two watchers, 70 puts (two words of bits), all acknowledged but put 5;
    # watcher 0 saw every key, watcher 1 all but 3 and 69
    seen = np.zeros((2, 2), np.uint64)
    seen[0] = [np.uint64(2**64 - 1), np.uint64(2**6 - 1)]
    one = np.ones(70, bool)
    one[[3, 69]] = False
    seen[1] = np.packbits(np.r_[one, np.zeros(58, bool)], bitorder="little").view(np.uint64)
    acked = np.ones(70, bool)
    acked[5] = False
    acked_bits = np.packbits(np.r_[acked, np.zeros(58, bool)], bitorder="little")
    events = WatchEvents(
        np.array([0, 1], np.uint16),
        np.array([0, 0], np.uint32),
        np.array([1500, 2500], np.uint32),
        np.array([10, 20], np.uint32),
        seen.ravel(),
        np.array([0, 2], np.uint64),
        np.array([1, 0], np.uint64),
        np.array([0, 0], np.uint64),
        np.array([0, 8], np.uint64),
        np.array([0, 1], np.uint64),
        1_800_000_000_000_000_000,
        acked_bits.view(np.uint64),
        70,
        np.r_[np.arange(69, dtype=np.uint32) * 10, np.uint32(2**32 - 1)],
        np.array([1, 1], np.uint16),
        np.array([30, 700], np.uint32),
    )
    path = tmp_path / "watch-events.npz"
    events.save(path)
    return WatchEvents.load(path)


#: the checked-in schema-1 results directory the trials are made from
V1 = ROOT / "tests" / "fixtures" / "results-v1"
IDS = ("etcd-v3.5", "etcd-v3.6")


def stretch(path: Path, factor: float) -> None:
    """Every request due ``factor`` times as far from the first: throughput / factor."""
    records = Records.load(path)
    start = records.due_ns.min()
    due = start + ((records.due_ns - start) * factor).astype(np.int64)
    Records(
        due, records.latency_ns, records.service_ns, records.code, records.step, records.codes
    ).save(path)


def make_trials(root: Path, factors: dict[str, list[float]]) -> Path:
    """A results directory with ``len(factors[id])`` trials of each database,
    every one made from the fixture's etcd 3.5 run: they differ only by the
    stretch."""
    root.mkdir()
    for name in ("config.yaml", "result.json"):
        shutil.copy(V1 / name, root / name)
    for db_id, stretches in factors.items():
        for k, factor in enumerate(stretches, start=1):
            trial = root / db_id / f"trial-{k}"
            shutil.copytree(V1 / IDS[0], trial)
            record = json.loads((trial / "run.json").read_text())
            database = {**record["database"], "id": db_id}
            (trial / "run.json").write_text(
                json.dumps({**record, "database": database, "trial": k})
            )
            stretch(trial / "client-latency.npz", factor)
    return root


DATABASES = ("etcd-v3.5", "etcd-v3.6")


def make_results(root: Path, seed: int = 1) -> Path:
    """A results directory as `dbtester run` writes it, with the
    README the report module renders and binary raw data, made without databases."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    table = "+------+\n| AVG-THROUGHPUT | 3,226 req/sec |\n+------+\n"
    readme = render_readme(
        "Write 20K keys", "etcd 3.5 vs 3.6 [details](config.yaml)", table, ["a note"], ""
    )
    (root / "README.md").write_text(readme)
    (root / "config.yaml").write_text("title: Write 20K keys\n")
    (root / "summary.txt").write_text(table)
    (root / "summary.csv").write_text("row,etcd v3.5\nAVG-THROUGHPUT,3226\n")
    result = {"schema_version": 1, "databases": [{"id": d} for d in DATABASES]}
    (root / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (root / "charts").mkdir()
    for chart in CHARTS:
        (root / "charts" / f"{chart.name}.svg").write_text(
            f'<svg xmlns="http://www.w3.org/2000/svg"><title>{chart.name}</title></svg>\n'
        )
    for db in DATABASES:
        (root / db).mkdir()
        (root / db / "client-latency.npz").write_bytes(rng.bytes(200_000))
        (root / db / "run.json").write_text(json.dumps({"members": [{"index": 0}]}))
        (root / db / "client-metrics.csv").write_text("unix_ms,cpu_percent\n1,2.5\n")
        for member in range(3):
            (root / db / f"server-{member}-metrics.csv").write_text("unix_ms,rss_bytes\n1,2\n")
            (root / db / f"server-{member}-database.log").write_bytes(rng.bytes(5_000))
            (root / db / f"server-{member}-agent.log").write_text("agent started\n")
    return root


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def derived_runs(
    source: Path, root: Path, factors: Sequence[float], *, copy_files: bool = True
) -> Path:
    """Runs ``run-0``, ``run-1``, ... a day apart below ``root``, derived from
    the results in ``source`` with their figures scaled by each factor
    (above 1: worse)."""
    from benchmarks.history_scale import derive_run

    store = ResultsDir(source)
    results, summary = store.load(), store.read_summary()
    assert summary is not None
    for k, factor in enumerate(factors):
        derive_run(
            results,
            summary,
            root / f"run-{k}",
            run_id=f"run-{k}",
            started_unix=summary.started_unix + k * DAY,
            factor=factor,
            copy_files=copy_files,
        )
    return root
