"""How big is report.html for a big run, and how long does it take to write?

Builds a results directory through the results store (the typed records,
the layout's paths) with DATABASES databases of REQUESTS requests each, spread
over SECONDS seconds, every member sampled once a second with noisy values
(noise compresses as badly as real samples do), optionally in client steps
and repeated trials; then renders it as `dbtester analyze` does and prints
report.html's size, the time the report alone took and the whole analysis's.
Target: under 5 MB for a 3M-request run.

    python benchmarks/report_size.py [--requests 3000000] [--databases 3]
        [--seconds 1000] [--trials 1] [--steps 1,10,100,1000]
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.analyze import analyze
from dbtester.render import render
from dbtester.report.interactive import render_html_report
from dbtester.results import (
    CLIENT_COLUMNS,
    SERVER_COLUMNS,
    DatabaseLayout,
    DatabaseRecord,
    Environment,
    LoadWindow,
    MemberRecord,
    Records,
    ResultsDir,
    RunSummary,
)

START = 1_800_000_000.0
MEMBERS = 3


def synthesize(root: Path, args: argparse.Namespace) -> None:
    rng = np.random.default_rng(7)
    store = ResultsDir(root)
    root.mkdir(parents=True, exist_ok=True)
    steps = [int(s) for s in args.steps.split(",")] if args.steps else []
    databases: list[dict[str, Any]] = [
        {
            "id": f"db{d}",
            "kind": "etcd",
            "version": "3.5.17",
            # one each: an object written twice would become a YAML alias
            "workload": {"type": "write", "requests": args.requests, "client_steps": list(steps)},
        }
        for d in range(args.databases)
    ]
    store.write_config({"title": "report size", "description": "synthetic", "databases": databases})
    store.write_summary(
        RunSummary(run_id="size", source="synthetic", started_unix=START, environment=Environment())
    )
    for database in databases:
        for trial in range(1, args.trials + 1) if args.trials > 1 else [None]:
            layout = store.database(database["id"], trial)
            layout.root.mkdir(parents=True)
            _requests(rng, args, len(steps)).save(layout.requests)
            _metrics(rng, layout, args.seconds, args.requests)
            store.write_record(_record(database, trial, args))


def _requests(rng: np.random.Generator, args: argparse.Namespace, steps: int) -> Records:
    n = args.requests
    due = (START * 1e9 + np.sort(rng.uniform(0, args.seconds * 1e9, n))).astype(np.int64)
    latency = rng.lognormal(np.log(5e6), 0.6, n).astype(np.int64)
    step = (np.arange(n) * max(steps, 1) // n).astype(np.uint16)
    return Records(due, latency, latency, np.zeros(n, np.uint8), step, ["ok"])


def _metrics(rng: np.random.Generator, layout: DatabaseLayout, seconds: int, n: int) -> None:
    rows = seconds + 2
    for member in range(MEMBERS):
        columns: dict[str, Any] = {
            name: rng.integers(0, 10_000_000, rows) for name in SERVER_COLUMNS
        }
        columns["unix_ms"] = ((START + np.arange(rows)) * 1000).astype(np.int64)
        columns["cpu_percent"] = np.round(rng.uniform(50, 190, rows), 1)
        columns["rss_bytes"] = 200_000_000 + np.cumsum(rng.integers(0, 2_000_000, rows))
        _write_csv(layout.server_metrics(member), SERVER_COLUMNS, columns)
    client: dict[str, Any] = {name: rng.integers(0, 10_000_000, rows) for name in CLIENT_COLUMNS}
    client["unix_ms"] = ((START + np.arange(rows)) * 1000).astype(np.int64)
    client["cpu_percent"] = np.round(rng.uniform(5, 40, rows), 1)
    client["requests_done"] = np.minimum(np.arange(rows) * n // seconds, n)
    client["errors"] = np.zeros(rows, np.int64)
    _write_csv(layout.client_metrics, CLIENT_COLUMNS, client)


def _write_csv(path: Path, names: tuple[str, ...], columns: dict[str, Any]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(names)
        writer.writerows(zip(*(columns[name] for name in names), strict=True))


def _record(
    database: dict[str, Any], trial: int | None, args: argparse.Namespace
) -> DatabaseRecord:
    return DatabaseRecord(
        run_id="size",
        database=database,
        started_unix=START,
        members=tuple(
            MemberRecord(index=m, host="127.0.0.1", agent="127.0.0.1:3500", disk_usage_bytes=10**9)
            for m in range(MEMBERS)
        ),
        load=LoadWindow(
            started_unix=START,
            ended_unix=START + args.seconds,
            workers=1,
            cpu_seconds=args.requests * 2e-5,
            counts={"ok": args.requests},
        ),
        trial=trial,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3_000_000)
    parser.add_argument("--databases", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--steps", default="", help="client steps, e.g. 1,10,100,1000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        synthesize(root, args)
        began = time.perf_counter()
        rendered = render(root)  # what `dbtester analyze` does
        whole = time.perf_counter() - began
        assert rendered.report is not None  # drawn: charts were asked for
        size = rendered.report.stat().st_size
        # the report alone, from the same analysis
        analysis = analyze(ResultsDir(root).load())
        began = time.perf_counter()
        render_html_report(analysis, rendered.summary, test_case="", comparison=rendered.comparison)
        took = time.perf_counter() - began
    print(
        f"report.html for {args.databases} databases x {args.trials} trial(s) x"
        f" {args.requests:,} requests over {args.seconds:,} s: {size / 1e6:.2f} MB"
        f" ({size:,} bytes), written in {took:.1f} s of the analysis's {whole:.1f} s"
    )


if __name__ == "__main__":
    main()
