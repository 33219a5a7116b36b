"""Would finer interleaving narrow an A/A throughput interval? Tried here.

Two single-member etcd servers of the same version (A and B: an A/A pair)
are both up for the whole script. Each design spends the same load time on
each side, alternating A and B:

- coarse: slices of ``--coarse`` seconds (default 6, about one trial of the
  demo today), each pair of slices one pair of trials;
- fine: slices of ``--fine`` seconds (default 1), the load switching side
  every slice, each pair of slices a pair.

For each design the 95% interval of the mean log ratio of B's throughput to
A's over the pairs (Student's t, pairs - 1 degrees of freedom) is printed as
a half-width in percent, with whether it excluded no change (a false
verdict, since A and B are the same). The designs alternate from run to run.
A design is worth building only if its median half-width is narrower at the
same false-verdict rate.

    python benchmarks/interleave_design.py [--seconds 30] [--runs 3]

Run it alone on the machine: client and servers share the cores.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fresh import FreshServer, workload
from dbtester.databases.base import LoadSettings
from dbtester.load import LoadOptions, run_load
from dbtester.results import DatabaseLayout

VERSION = "3.5.17"
KEY_SIZE, VALUE_SIZE, CLIENTS, CONNECTIONS = 64, 256, 20, 4


def _throughput(settings: LoadSettings, requests: int, out: Path) -> float:
    load = workload(True, requests, (KEY_SIZE, VALUE_SIZE), CLIENTS, CONNECTIONS)
    result = run_load("etcd", settings, load, DatabaseLayout(out), LoadOptions(progress=None))
    if result.errors:
        raise SystemExit(f"errors: {result.records.counts()}")
    return result.records.throughput()


def _design(
    sides: tuple[LoadSettings, LoadSettings], slice_requests: int, pairs: int, out: Path
) -> tuple[float, bool]:
    """(the interval's half-width in percent, whether it excluded 0)."""
    ratios = []
    for k in range(pairs):
        a = _throughput(sides[0], slice_requests, out / f"a{k}")
        b = _throughput(sides[1], slice_requests, out / f"b{k}")
        ratios.append(math.log(b / a))
    values = np.array(ratios)
    mean = float(values.mean())
    half = float(stats.t.ppf(0.975, pairs - 1) * values.std(ddof=1) / math.sqrt(pairs))
    width = 100 * (math.exp(half) - 1)
    return width, abs(mean) > half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="load time per side per design")
    parser.add_argument("--coarse", type=float, default=6.0)
    parser.add_argument("--fine", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    servers = [FreshServer("etcd", VERSION, CONNECTIONS) for _ in range(2)]
    try:
        sides = tuple(
            LoadSettings((s.endpoint,), {}, KEY_SIZE, VALUE_SIZE, "serializable", 10.0)
            for s in servers
        )
        assert len(sides) == 2
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            rate = _throughput(sides[0], 3000, root / "calibrate")
            print(f"etcd {VERSION}, 1 member each, writes: about {rate:,.0f} req/s")
            widths: dict[str, list[float]] = {"coarse": [], "fine": []}
            false: dict[str, int] = {"coarse": 0, "fine": 0}
            for run in range(args.runs):
                order = ["coarse", "fine"] if run % 2 == 0 else ["fine", "coarse"]
                for name in order:
                    slice_s = args.coarse if name == "coarse" else args.fine
                    pairs = max(2, round(args.seconds / slice_s))
                    width, excluded = _design(
                        (sides[0], sides[1]),
                        max(1, round(rate * slice_s)),
                        pairs,
                        root / f"{run}-{name}",
                    )
                    widths[name].append(width)
                    false[name] += excluded
                    print(
                        f"run {run + 1} {name:6s}: {pairs:3d} pairs of {slice_s:g} s,"
                        f" interval ±{width:.2f}%{' (excluded 0)' if excluded else ''}"
                    )
            for name in ("coarse", "fine"):
                print(
                    f"{name:6s}: median half-width ±{statistics.median(widths[name]):.2f}%"
                    f" over {args.runs} runs; {false[name]} excluded no change"
                )
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()
