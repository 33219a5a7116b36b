"""dbtester's load engine against etcd's own Go benchmark tool.

Both drive the same workload against a fresh single-member etcd on loopback,
interleaved (Go, dbtester, dbtester, Go, ...) in the same minutes: puts of
distinct 256-byte keys (the Go tool with --key-space-size, else it overwrites
one key) and 1 KB values with 1000 clients over 100 connections, then
serializable ranges of one key. Prints each run's throughput and client CPU in
microseconds per request (user + system of the client process), then per
operation the median over the pairs of each pair's ratio (dbtester / Go tool).

    python benchmarks/vs_etcd_benchmark.py [--requests 100000] [--rounds 3]

The Go tool is built once through the Go module proxy into $DBTESTER_HOME
(about a minute). On a 2-core machine client and server share the cores, so
client CPU per request decides the ratio: run it alone.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fresh import Figure, FreshServer, workload
from dbtester.databases.base import LoadSettings
from dbtester.install import GoBuild, ensure_installed
from dbtester.load.runner import LoadOptions, run_load, seed_key
from dbtester.results import DatabaseLayout
from dbtester.util.keys import KeySpace
from dbtester.util.progress import Reporter

KEY_SIZE, VALUE_SIZE, CLIENTS, CONNECTIONS = 256, 1024, 1000, 100


def go_tool(version: str) -> Path:
    tool = ensure_installed(
        "etcd-benchmark",
        version,
        [
            GoBuild(
                module="go.etcd.io/etcd/v3",
                version=f"v{version}",
                package="go.etcd.io/etcd/v3/tools/benchmark",
                binary="benchmark",
            )
        ],
        Reporter(),
    )
    return tool.path("benchmark")


def run_go(tool: Path, endpoint: str, op: str, requests: int, key: bytes) -> Figure:
    common = [
        str(tool),
        f"--endpoints={endpoint}",
        f"--conns={CONNECTIONS}",
        f"--clients={CLIENTS}",
    ]
    if op == "put":
        argv = [
            *common,
            "put",
            f"--key-size={KEY_SIZE}",
            f"--val-size={VALUE_SIZE}",
            f"--total={requests}",
            f"--key-space-size={requests}",
            "--sequential-keys",
        ]
    else:
        argv = [*common, "range", key.decode(), "--consistency=s", f"--total={requests}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"Go benchmark failed:\n{output}")
    total = float(re.search(r"Total:\s+([\d.]+) secs", output).group(1))  # type: ignore[union-attr]
    return Figure("go", op, requests, total, usage.ru_utime + usage.ru_stime)


def run_ours(
    endpoint: str, op: str, requests: int, key: bytes, out: Path, workers: int | None
) -> Figure:
    settings = LoadSettings(
        (endpoint,), {"balancer": "pick_first"}, KEY_SIZE, VALUE_SIZE, "serializable", 30.0
    )
    load = workload(op == "put", requests, (KEY_SIZE, VALUE_SIZE), CLIENTS, CONNECTIONS)
    result = run_load(
        "etcd", settings, load, DatabaseLayout(out), LoadOptions(progress=None, workers=workers)
    )
    if result.errors:
        raise SystemExit(f"dbtester saw errors: {result.records.counts()}")
    records = result.records
    # Same measure as the Go tool's "Total": first request to last reply.
    span = (records.due_ns + records.latency_ns).max() - records.due_ns.min()
    return Figure("dbtester", op, requests, span / 1e9, result.cpu_seconds)


def seed(endpoint: str) -> None:
    settings = LoadSettings((endpoint,), {}, KEY_SIZE, VALUE_SIZE, "serializable", 30.0)
    seed_key("etcd", settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--version", default="3.5.17")
    parser.add_argument("--workers", type=int, default=None, help="engine threads [1]")
    args = parser.parse_args()
    tool = go_tool(args.version)
    key = KeySpace(1, KEY_SIZE, same_key=True).key(0)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for op in ("put", "range"):
                # Alternate who goes first, each against a fresh server.
                sides = ("go", "dbtester") if round_ % 2 == 0 else ("dbtester", "go")
                for side in sides:
                    server = FreshServer("etcd", args.version, CONNECTIONS)
                    try:
                        if op == "range":
                            seed(server.endpoint)
                        if side == "go":
                            figure = run_go(tool, server.endpoint, op, args.requests, key)
                        else:
                            out = Path(scratch) / f"{round_}-{op}"
                            figure = run_ours(
                                server.endpoint, op, args.requests, key, out, args.workers
                            )
                    finally:
                        server.stop()
                    figures.append(figure)
                    print(
                        f"round {round_ + 1} {op:5} {side:8} {figure.rate:9,.0f} req/s"
                        f"  {figure.us_per_request:6.1f} us CPU/request",
                        flush=True,
                    )
    print()
    for op in ("put", "range"):
        ours = [f for f in figures if f.op == op and f.who == "dbtester"]
        go = [f for f in figures if f.op == op and f.who == "go"]
        rate = statistics.median(a.rate / b.rate for a, b in zip(ours, go, strict=True))
        cpu = statistics.median(
            a.us_per_request / b.us_per_request for a, b in zip(ours, go, strict=True)
        )
        print(
            f"{op:5}: median of {len(ours)} pairs: throughput ratio {rate:.2f}"
            f" (dbtester {statistics.median(f.rate for f in ours):,.0f} req/s,"
            f" Go tool {statistics.median(f.rate for f in go):,.0f});"
            f" client CPU ratio {cpu:.2f}"
            f" ({statistics.median(f.us_per_request for f in ours):.1f} vs"
            f" {statistics.median(f.us_per_request for f in go):.1f} us/request)"
        )


if __name__ == "__main__":
    main()
