"""How long does `dbtester analyze` take for a big run, and how much memory?

Builds a results directory with SAMPLES latency records (default 3,000,000,
as the read-3M case has) and 3 members' per-second server samples for each of
DATABASES databases, then runs the real analysis (table, CSV, 19 SVG charts
and the latency heatmap, README, report.html, Parquet) and prints the wall
time and the process's peak RSS. Target: at most 3 s and 600 MB for 3M samples.

    python benchmarks/analysis_speed.py [--samples 3000000] [--databases 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.render import render
from dbtester.results import CLIENT_COLUMNS, SCHEMA_VERSION, Records
from dbtester.results import SERVER_COLUMNS as COLUMNS


def synthesize(directory: Path, samples: int, databases: int, seconds: int) -> None:
    rng = np.random.default_rng(7)
    start = 1_800_000_000.0
    entries: list[dict[str, str]] = []
    config = {
        "title": "analysis benchmark",
        "description": "synthetic",
        "databases": entries,
        "workload": {"type": "read", "requests": samples},
    }
    for d in range(databases):
        db_id = f"db{d}"
        entries.append({"id": db_id, "kind": "etcd", "version": "3.5.17"})
        folder = directory / db_id
        folder.mkdir(parents=True)
        due = (start * 1e9 + np.sort(rng.uniform(0, seconds * 1e9, samples))).astype(np.int64)
        latency = rng.lognormal(np.log(2e6), 0.5, samples).astype(np.int64)
        records = Records(
            due, latency, latency, np.zeros(samples, np.uint8), np.zeros(samples, np.uint16), ["ok"]
        )
        records.save(folder / "client-latency.npz")
        members = []
        for m in range(3):
            with (folder / f"server-{m}-metrics.csv").open("w", newline="") as out:
                writer = csv.writer(out)
                writer.writerow(COLUMNS)
                for s in range(seconds + 2):
                    writer.writerow(
                        [
                            int((start + s) * 1000),
                            100 + m,
                            150.0,
                            200_000_000 + s,
                            40,
                            500,
                            50,
                            0,
                            1_000_000,
                            0,
                            0,
                            300,
                            9000,
                            5_000_000,
                            5_000_000,
                            100_000_000 + s * 1000,
                        ]
                    )
            members.append(
                {
                    "index": m,
                    "host": "127.0.0.1",
                    "agent": f"127.0.0.1:{3500 + m}",
                    "pid": 100 + m,
                    "disk_usage_bytes": 1_000_000_000,
                }
            )
        with (folder / "client-metrics.csv").open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(CLIENT_COLUMNS)
            for s in range(seconds + 2):
                writer.writerow(
                    [
                        int((start + s) * 1000),
                        180.0,
                        150_000_000,
                        9_000_000,
                        9_000_000,
                        s * samples // seconds,
                        0,
                    ]
                )
        run = {
            "schema_version": SCHEMA_VERSION,
            "run_id": "analysis-benchmark",
            "started_unix": start,
            "endpoints": [f"127.0.0.1:{2379 + 10 * m}" for m in range(3)],
            "database": {"id": db_id, "kind": "etcd", "version": "3.5.17"},
            "members": members,
            "embedded": True,
            "error": "",
            "load": {
                "started_unix": start,
                "ended_unix": start + seconds,
                "workers": 2,
                "cpu_seconds": samples * 1e-4,
                "counts": {"ok": samples},
            },
        }
        (folder / "run.json").write_text(json.dumps(run))
    (directory / "config.yaml").write_text(yaml.safe_dump(config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3_000_000)
    parser.add_argument("--databases", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        synthesize(directory, args.samples, args.databases, args.seconds)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        render(directory)
        elapsed = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"analysis of {args.databases} x {args.samples:,} latency samples: {elapsed:.1f} s,"
        f" peak RSS {peak / 1024:.0f} MB (before analysis {before / 1024:.0f} MB)"
    )


if __name__ == "__main__":
    main()
