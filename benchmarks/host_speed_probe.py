"""What the host-speed probe costs, and how steady it reads on this machine.

Every sampler (each agent's, and the client's) runs the probe once a second
(``dbtester.util.speed``). This prints the CPU one sample takes (the fastest
of three runs of the fixed piece is kept, but all three are paid), its share
of one core at one sample a second, and the spread of the speed it reads:
back to back (the probe's own noise plus the fastest changes of the machine)
and at one sample a second for ``--seconds`` (what HOST-SPEED-CV sees on an
idle run).

    python benchmarks/host_speed_probe.py [--seconds 30]

Run it alone: another process on the cores is what the probe is there to see.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.util.speed import PROBE_ROUNDS, PROBE_WORK, probe_ns


def _cv(values: list[float]) -> float:
    return 100.0 * statistics.stdev(values) / statistics.mean(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()

    costs = []
    for _ in range(200):
        start = time.thread_time_ns()
        probe_ns()
        costs.append(time.thread_time_ns() - start)
    cost_ms = statistics.median(costs) / 1e6
    print(f"probe: {PROBE_WORK:,} iterations, fastest of {PROBE_ROUNDS} runs kept")
    print(f"one sample: {cost_ms:.2f} ms of CPU (median of 200)")
    print(f"at one sample a second: {cost_ms / 10:.2f}% of one core")

    back_to_back = [1e9 / probe_ns() for _ in range(200)]
    print(f"back to back, 200 samples: speed CV {_cv(back_to_back):.1f}%")

    per_second = []
    for _ in range(args.seconds):
        per_second.append(1e9 / probe_ns())
        time.sleep(1.0)
    print(
        f"one a second, {args.seconds} s: speed CV {_cv(per_second):.1f}%,"
        f" median {statistics.median(per_second):,.0f} probes/s"
    )


if __name__ == "__main__":
    main()
