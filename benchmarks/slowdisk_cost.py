"""What does the slow-disk layer cost with no delay set?

Runs one closed-loop write load against a 1-member database twice per pair,
interleaved (A, B, B, A, ...): A without the layer, B with it mounted under
the data directory (a ``slow_disk`` fault due long after the load, so it is
mounted at the start and never slows anything). Prints each pair's
throughput and p50 latency, and the median ratio B/A.

    python benchmarks/slowdisk_cost.py [--kind etcd] [--pairs 5] [--requests 20000] [--rate 0]

Run it alone on the machine: the load takes both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

VERSIONS = {"etcd": "3.6.8", "zookeeper": "3.8.4", "consul": "1.20.5"}


def _case(kind: str, requests: int, rate: int, layered: bool) -> dict[str, Any]:
    case: dict[str, Any] = {
        "title": f"slow-disk layer cost, {kind}",
        "workload": {
            "type": "write",
            "requests": requests,
            "clients": 50,
            "connections": 10,
            "key_size": 64,
            "value_size": 256,
        }
        | ({"rate": rate} if rate else {}),
        "databases": [{"id": kind, "kind": kind, "version": VERSIONS[kind], "members": 1}],
    }
    if layered:
        # due after the load: the layer is mounted, no delay is ever set
        case["faults"] = [{"at": "60m", "action": "slow_disk", "member": 0, "fsync_ms": 1}]
    return case


def _run(args: argparse.Namespace, layered: bool, tmp: Path, n: int) -> tuple[float, float]:
    config = tmp / f"case-{n}.yaml"
    config.write_text(yaml.safe_dump(_case(args.kind, args.requests, args.rate, layered)))
    out = tmp / f"out-{n}"
    done = subprocess.run(
        [sys.executable, "-m", "dbtester", "run", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        env=os.environ,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"run failed:\n{done.stderr[-2000:]}")
    (db,) = json.loads((out / "result.json").read_text())["databases"]
    figures = db["figures"]
    return float(figures["AVG-THROUGHPUT"]), float(str(figures["Latency p50"]).split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="etcd", choices=sorted(VERSIONS))
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=0, help="writes/s offered (0: closed loop)")
    args = parser.parse_args()
    ratios: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for pair in range(args.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            got = {
                layered: _run(args, layered, tmp, 2 * pair + i) for i, layered in enumerate(order)
            }
            (plain_rps, plain_p50), (layer_rps, layer_p50) = got[False], got[True]
            ratios.append((layer_rps / plain_rps, layer_p50 / plain_p50))
            print(
                f"pair {pair + 1}: without {plain_rps:,.0f} req/s p50 {plain_p50:.2f} ms;"
                f" with the layer {layer_rps:,.0f} req/s p50 {layer_p50:.2f} ms",
                flush=True,
            )
    throughput = statistics.median(r for r, _ in ratios)
    p50 = statistics.median(p for _, p in ratios)
    loop = f"at {args.rate:,}/s" if args.rate else "closed-loop"
    print(
        f"{args.kind}, {args.pairs} pairs of {args.requests:,} writes {loop}: with the"
        f" layer / without, median throughput ratio {throughput:.3f}, p50 ratio {p50:.3f}"
    )


if __name__ == "__main__":
    main()
