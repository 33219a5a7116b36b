"""Kubernetes' lists as the objects grow: a 3-member etcd on this machine
holding 1,000, 10,000 and 100,000 objects of 2 KB, listed whole by a few
clients at a time (500 objects a page, every page at the first one's
revision). Prints, per size: the load phase's create rate, lists per second
and objects listed per second, the p99 of a whole list, the members' peak
memory, largest dbSize and data directory, and the controller's peak
memory (the load engine runs in it: its table of objects, the records).

    python benchmarks/kubernetes_scale.py [--sizes 1000 10000 100000] [--lists 40]
        [--version 3.5.17]

Each size is a `dbtester run` of its own (fresh cluster); run it alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def case(objects: int, lists: int, version: str) -> dict[str, object]:
    return {
        "title": f"Kubernetes lists over {objects:,} objects",
        "workload": {
            "type": "kubernetes",
            "objects": objects,
            "object_size": 2048,
            "namespaces": 10,
            "page_size": 500,
            "requests": lists,
            "get_proportion": 0.0,
            "list_proportion": 1.0,
            "create_proportion": 0.0,
            "update_proportion": 0.0,
            "delete_proportion": 0.0,
            "clients": 4,
            "connections": 4,
            # a list of 100,000 objects is 200 pages: 9-13 s here, past the
            # default 10 s
            "request_timeout_s": 300.0,
        },
        "databases": [{"id": "etcd", "kind": "etcd", "version": version, "members": 3}],
    }


def run(objects: int, lists: int, version: str, scratch: Path) -> None:
    path = scratch / f"case-{objects}.yaml"
    path.write_text(yaml.safe_dump(case(objects, lists, version)))
    out = scratch / f"out-{objects}"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dbtester", "run", str(path), "--out", str(out), "--no-charts"],
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{objects:,} objects: dbtester run failed:\n{done.stderr[-3000:]}")
    db = json.loads((out / "result.json").read_text())["databases"][0]
    f = db["figures"]
    record = json.loads((out / "etcd" / "run.json").read_text())
    phase = record["load_phase"]
    created = objects / max(phase["ended_unix"] - phase["started_unix"], 1e-9)
    server_mb = f["SERVER-MAX-MEMORY-USAGE"] / 1e6
    disk_mb = f["SERVER-AVG-DISK-SPACE-USAGE"] / 1e6
    db_mb = f.get("SERVER-MAX-DB-SIZE", 0) / 1e6
    client_mb = f["CLIENT-MAX-MEMORY-USAGE"] / 1e6
    print(
        f"{objects:>8,} objects: create {created:7,.0f}/s | {f['AVG-THROUGHPUT']:6,.1f} lists/s,"
        f" {f['LIST-OBJECTS-PER-S']:9,.0f} objects/s, {f['LIST-MB-PER-S']:5,.0f} MB/s,"
        f" list p99 {f['Latency p99']:8,.1f} ms | members' peak memory {server_mb:6,.0f} MB,"
        f" dbSize {db_mb:5,.0f} MB, data dir {disk_mb:5,.0f} MB |"
        f" controller peak {client_mb:5,.0f} MB | run {took:4.0f} s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--lists", type=int, default=40)
    parser.add_argument("--version", default="3.5.17")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for objects in args.sizes:
            run(objects, args.lists, args.version, Path(scratch))


if __name__ == "__main__":
    main()
