"""How often does `dbtester history --changes` name a change that is not
there, and how often does it find one that is?

Simulates histories of RUNS runs of one metric (normal noise, sigma = 2% of the
mean; each run one trial, as a nightly job): pure noise; one run 6sigma off (an
outlier); a shift of k sigma starting at run 12 of 20. For each, the share of
histories in which a change point is named, and for the shifts the share
where it is named at the right run (±1).

    python benchmarks/change_points.py [--histories 500] [--runs 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.history.changes import find_changes
from dbtester.history.query import History, RunFigures

DAY = 86400.0
MEAN = 10_000.0
SIGMA = 0.02 * MEAN


def history(values: np.ndarray) -> History:
    runs = tuple(
        RunFigures(f"run-{i}", 1.8e9 + i * DAY, "db", "etcd", "3.6.8", {"AVG-THROUGHPUT": (v,)})
        for i, v in enumerate(values)
    )
    return History("sim", runs, 0)


def named(values: np.ndarray) -> list[int]:
    found = find_changes(history(values), ["AVG-THROUGHPUT"])
    return [int(p.run.run_id.split("-")[1]) for p in found.points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    at = args.runs * 3 // 5
    cases: list[tuple[str, float, int | None]] = [("noise only", 0.0, None)]
    cases.append(("one run 6 sigma low", -6.0, None))
    cases += [(f"shift of {k:g} sigma at run {at}", -k, at) for k in (1, 2, 3, 4)]
    started = time.perf_counter()
    print(f"{args.histories} histories of {args.runs} runs each, noise sigma 2% of the mean")
    for name, size, shift_at in cases:
        any_named = right = 0
        for _ in range(args.histories):
            values = rng.normal(MEAN, SIGMA, args.runs)
            if shift_at is None and size:
                values[rng.integers(0, args.runs)] += size * SIGMA
            elif shift_at is not None:
                values[shift_at:] += size * SIGMA
            found = named(values)
            any_named += bool(found)
            right += shift_at is not None and any(abs(f - shift_at) <= 1 for f in found)
        line = f"  {name}: a change named in {100 * any_named / args.histories:.1f}%"
        if shift_at is not None:
            line += f", at the right run (+-1) in {100 * right / args.histories:.1f}%"
        print(line)
    took = time.perf_counter() - started
    per = took / (len(cases) * args.histories) * 1e3
    print(f"{took:.1f} s in all, {per:.2f} ms a history")


if __name__ == "__main__":
    main()
