"""Trials or slices for the demo's question: which decides within its budget,
and how often wrongly? A/A and A/B runs of the demo's test case in each
design, alternated, each a real ``dbtester run`` on this machine.

- A/A: etcd 3.5.17 against itself. Any verdict on AVG-THROUGHPUT
  ("faster", "slower") is wrong; "equivalent" is right.
- A/B: the second entry's load is capped at 90% of the first's measured
  throughput (an open loop at that rate), a true change of about -10%:
  "slower" is right; "faster" and "equivalent" are wrong.

Each run is the demo's case (3 members each, 100 clients, ``repeat: auto``
on AVG-THROUGHPUT alone, ``time_budget``) with ``interleave: trials`` or
``interleave: slices``. Every run appends one line to ``--log`` (JSON), so
the script can be stopped and run again to add runs; the table is printed
over every line in the log, each slice length (``--slice``) its own design:

    python benchmarks/design_error_rates.py [--runs 2] [--budget 120]
        [--slice 5] [--log benchmarks/design_error_rates.jsonl] [--table-only]

``--runs N`` adds N of each (design x A/A, A/B), in an order that alternates
them. Run it alone: each run is the machine's whole work for about 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
VERSION = "3.5.17"
WORKLOAD = {
    "type": "write",
    "key_size": 256,
    "value_size": 1024,
    "sequential_keys": True,
    "clients": 100,
    "connections": 10,
}
DESIGNS = ("trials", "slices")
KINDS = ("A/A", "A/B")


def case(design: str, kind: str, budget: float, slice_s: float, capped: float) -> dict[str, Any]:
    second: dict[str, Any] = {"id": "b", "kind": "etcd", "version": VERSION, "members": 3}
    if kind == "A/B":
        second["workload"] = {"rate": capped}
    raw: dict[str, Any] = {
        "title": f"{kind} in {design}",
        # trials: the demo's 20,000 writes each; slices: a cap only
        "workload": {**WORKLOAD, "requests": 20_000 if design == "trials" else 5_000_000},
        "databases": [{"id": "a", "kind": "etcd", "version": VERSION, "members": 3}, second],
        "repeat": "auto",
        "time_budget": budget,
        "stopping_metrics": ["AVG-THROUGHPUT"],
    }
    if design == "slices":
        raw |= {"interleave": "slices", "slice_s": slice_s}
    return raw


def run(raw: dict[str, Any], scratch: Path) -> tuple[dict[str, Any], float]:
    """result.json of a run of ``raw``, and its wall time."""
    path, out = scratch / "case.yaml", scratch / "out"
    path.write_text(yaml.safe_dump(raw))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dbtester", "run", str(path), "--out", str(out), "--no-charts"],
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - began
    if not (out / "result.json").exists():
        raise SystemExit(f"dbtester run failed:\n{done.stderr[-3000:]}")
    return json.loads((out / "result.json").read_text()), took


def throughput(scratch: Path) -> float:
    """The first database's closed-loop throughput here, from one trials run."""
    raw = case("trials", "A/A", 60, 5, 0)
    raw["repeat"] = 3
    for key in ("time_budget", "stopping_metrics"):
        raw.pop(key)
    summary, _ = run(raw, scratch)
    return float(summary["databases"][0]["figures"]["AVG-THROUGHPUT"])


def right(kind: str, verdict: str) -> bool | None:
    """Whether ``verdict`` is right (None: undecided)."""
    if verdict == "undecided":
        return None
    return verdict == ("equivalent" if kind == "A/A" else "slower")


def one(design: str, kind: str, args: argparse.Namespace, capped: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        summary, took = run(case(design, kind, args.budget, args.slice, capped), Path(scratch))
    sequential = summary.get("sequential") or {}
    looks = sequential.get("looks") or []
    look = looks[0] if looks else {"verdict": "undecided", "change_pct": None, "trials": 0}
    return {
        "design": design,
        "kind": kind,
        "verdict": look["verdict"],
        "change_pct": look["change_pct"],
        "rounds": look["trials"],
        "stopped": sequential.get("stopped", ""),
        "seconds": round(took, 1),
        "budget": args.budget,
        "slice_s": args.slice if design == "slices" else None,
        "capped_rate": capped if kind == "A/B" else None,
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _design(line: dict[str, Any]) -> str:
    """A run's design, with its slice length for slices ("slices 5s")."""
    if line["design"] == "slices":
        return f"slices {line['slice_s']:g}s"
    return str(line["design"])


def table(lines: list[dict[str, Any]]) -> None:
    """Per design (each slice length apart) and test: how often a run
    decided, how often wrongly, its median wall time."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        groups[(_design(line), line["kind"])].append(line)
    print(f"{'design':11} {'test':5} {'runs':>5} {'decided':>10} {'wrong':>9} {'median s':>9}")
    for design, kind in sorted(groups):
        found = groups[(design, kind)]
        judged = [right(kind, x["verdict"]) for x in found]
        decided = sum(j is not None for j in judged)
        wrong = sum(j is False for j in judged)
        seconds = median(x["seconds"] for x in found)
        print(
            f"{design:11} {kind:5} {len(found):5d} {decided:4d} ({decided / len(found):4.0%})"
            f" {wrong:3d} ({wrong / len(found):3.0%}) {seconds:9.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="new runs of each design and test")
    parser.add_argument("--budget", type=float, default=120.0, help="repeat: auto's time_budget")
    parser.add_argument("--slice", type=float, default=5.0, help="slice_s of the slices runs")
    parser.add_argument("--log", type=Path, default=ROOT / "benchmarks/design_error_rates.jsonl")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    if not args.table_only and args.runs > 0:
        with tempfile.TemporaryDirectory() as scratch:
            capped = round(0.9 * throughput(Path(scratch)))
        print(f"A/B: the second entry capped at {capped:,} req/s", flush=True)
        for n in range(args.runs):
            order = [(d, k) for d in DESIGNS for k in KINDS]
            if n % 2:
                order.reverse()  # neither design always runs first
            for design, kind in order:
                line = one(design, kind, args, capped)
                with args.log.open("a") as log:
                    log.write(json.dumps(line) + "\n")
                print(json.dumps(line), flush=True)
    lines = [json.loads(x) for x in args.log.read_text().splitlines()] if args.log.exists() else []
    table(lines)


if __name__ == "__main__":
    main()
