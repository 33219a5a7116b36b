"""Open-loop send lag: how long after its due time the load engine begins
sending a request, beside the latency it records, against a fresh
single-member etcd on loopback.

Runs, through ``dbtester._engine`` with the plans ``dbtester/load/native.py``
builds for a write workload (puts of distinct 256-byte keys, 1 KB values), a
closed loop with one client, then open loops at each ``--rates`` rate, and
prints for each: latency p50/p99, send lag p50/p99 (ms), the requests that
found every client busy (the open loop's queue, whose wait is not lag), and
the engine's CPU per request (the whole process's user + system time through
the load, in µs; Python only polls four times a second).

Send lag is latency_ns - service_ns of the requests not ``queued``: latency
runs from the due time, service time from when the engine began sending.

    python benchmarks/open_loop_lag.py [--rates 200 2000 10000] [--seconds 5]
        [--clients 100 --connections 10] [--engine lib_engine.so] [--go]

``--go`` runs etcd's own Go benchmark tool the same way beside each load (one
client closed loop, then each rate), on the same server: its latencies run
from each request's send (0.1 ms resolution), so they say what the server
and the host take at that rate with no send lag at all. At low rates both
tools see the same rise over the closed loop: etcd and the kernel waking from
idle for each request, not the engine.

``--engine`` measures another build of the engine's library (``lib_engine.so``
from ``cargo build --release --features extension-module`` in engine/, copied
aside); one from before the ``queued`` column counts every request as lag.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VERSION = "3.5.17"
KEY_SIZE, VALUE_SIZE = 256, 1024


def write_plan(
    endpoint: str, first: int, requests: int, clients: int, connections: int, rate: float
) -> dict[str, Any]:
    """What ``dbtester.load.native.plan`` builds for a write workload of
    ``requests`` puts of new keys (numbered from ``first``) against etcd."""
    return {
        "protocol": "etcd",
        "endpoints": [endpoint],
        "options": {"balancer": "pick_first"},
        "key_size": KEY_SIZE,
        "value_size": VALUE_SIZE,
        "values": "fixed",
        "keys": {
            "existing": 0,
            "first": first,
            "choose": "same",
            "inserts": "permuted",
            "insert_space": requests,
            "zipfian_constant": 0.99,
            "hot_set_fraction": 0.2,
            "hot_operation_fraction": 0.8,
        },
        "mix": {"read": 0.0, "update": 0.0, "insert": 1.0, "read_modify_write": 0.0},
        "consistency": "serializable",
        "timeout_s": 30.0,
        "steps": [
            {"clients": clients, "connections": connections, "requests": requests, "rate": rate}
        ],
        "threads": 1,
        "max_errors": None,
        "seed": 1,
        "write_id_base": 0,
        "watch": None,
        "check": None,
    }


def load_engine(path: Path | None) -> Any:
    if path is None:
        from dbtester import _engine

        return _engine
    # The library's init function is PyInit__engine: the module must be named _engine.
    loader = importlib.machinery.ExtensionFileLoader("_engine", str(path))
    spec = importlib.util.spec_from_file_location("_engine", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run(engine: Any, plan: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The load's records and the process's CPU seconds through it."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    load = engine.start(plan)
    while not load.wait(0.25):
        pass
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    result = load.result()
    if result["code"].any():
        codes = result["codes"]
        counts = {codes[c]: int((result["code"] == c).sum()) for c in np.unique(result["code"])}
        raise SystemExit(f"errors: {counts}")
    return result, cpu


def ms(values: np.ndarray, q: float) -> str:
    if len(values) == 0:
        return "    -"
    return f"{np.percentile(values, q) / 1e6:.3f}"


def report(name: str, result: dict[str, Any], cpu: float) -> None:
    latency = result["latency_ns"]
    lag_all = latency - result["service_ns"]
    queued = result.get("queued")
    if queued is None:  # an engine from before the column: all of it counts
        queued = np.zeros(len(latency), dtype=np.uint8)
    free = queued == 0
    lag = lag_all[free]
    print(
        f"{name:14} {len(latency):7,} {ms(latency, 50):>7} {ms(latency, 99):>7}"
        f"  {ms(lag, 50):>7} {ms(lag, 99):>7}  {int((~free).sum()):7,}"
        f"  {1e6 * cpu / len(latency):8.1f}",
        flush=True,
    )


def go_latency(endpoint: str, rate: float, requests: int, clients: int, conns: int) -> str:
    """etcd's Go benchmark tool's put p50 and p99 (ms, from send) at ``rate``
    (0: closed loop), on keys of its own."""
    from benchmarks.vs_etcd_benchmark import go_tool

    argv = [
        str(go_tool(VERSION)),
        f"--endpoints={endpoint}",
        f"--conns={conns}",
        f"--clients={clients}",
        "put",
        f"--key-size={KEY_SIZE}",
        f"--val-size={VALUE_SIZE}",
        f"--total={requests}",
        f"--key-space-size={requests}",
        "--sequential-keys",
        *([f"--rate={rate:g}"] if rate else []),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    found = [re.search(rf"{q}% in ([\d.]+) secs", out) for q in (50, 99)]
    p50, p99 = (float(m.group(1)) * 1e3 if m else float("nan") for m in found)
    return f"{'  go tool':14} {requests:7,} {p50:7.3f} {p99:7.3f}  (from send)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", nargs="+", type=float, default=[200.0, 2000.0, 10000.0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each open loop's length")
    parser.add_argument("--closed-requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=100, help="open loop's clients")
    parser.add_argument("--connections", type=int, default=10, help="open loop's connections")
    parser.add_argument("--engine", type=Path, default=None, help="another build's library")
    parser.add_argument("--go", action="store_true", help="etcd's Go tool beside each load")
    args = parser.parse_args()
    engine = load_engine(args.engine)

    from benchmarks.fresh import FreshServer

    server = FreshServer("etcd", VERSION, args.connections)
    try:
        endpoint = server.endpoint
        # A short warm-up: the first connection and etcd's first writes.
        run(engine, write_plan(endpoint, 10_000_000, 500, 1, 1, 0.0))
        print(
            f"{'load':14} {'requests':>7} {'lat p50':>7} {'lat p99':>7}  {'lag p50':>7}"
            f" {'lag p99':>7}  {'queued':>7}  {'us CPU/req':>8}"
        )
        first = 0
        closed = args.closed_requests
        result, cpu = run(engine, write_plan(endpoint, first, closed, 1, 1, 0.0))
        report("closed, 1", result, cpu)
        if args.go:
            print(go_latency(endpoint, 0.0, closed, 1, 1), flush=True)
        first += closed
        for rate in args.rates:
            requests = max(1, round(rate * args.seconds))
            plan = write_plan(endpoint, first, requests, args.clients, args.connections, rate)
            result, cpu = run(engine, plan)
            report(f"open {rate:,.0f}/s", result, cpu)
            if args.go:
                print(go_latency(endpoint, rate, requests, args.clients, args.connections))
            first += requests
    finally:
        server.stop()
    print("latency and send lag in ms; lag of the requests not queued behind busy clients")


if __name__ == "__main__":
    main()
