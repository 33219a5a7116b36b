"""How steady is this machine's CPU? The floor under any trial-to-trial spread.

dbtester's trials of one database differ even when nothing in the setup does:
on a shared virtual machine the host's other tenants and its frequency
scaling change how much work a core does per second, and a benchmark whose
members and client saturate the cores (the embedded default does) runs
exactly that much faster or slower. This script measures that variation with
no database at all: one process pinned to each core does the same fixed piece
of work over and over for ``--seconds`` and records how long each took. The
machine's speed at a moment is the mean over the cores of (fastest time /
time); its averages over windows of a trial's length are what a trial sees.

It prints, per window length, the coefficient of variation of those window
averages: no change to dbtester can bring the THROUGHPUT-CV of CPU-bound
trials of that length below this figure on this machine. Run it alone.

    python benchmarks/host_noise.py [--seconds 120] [--windows 1 2 5 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

# One piece of work: ~10 ms of pure-Python arithmetic on this machine, short
# enough to see second-scale changes and long enough that timer resolution
# does not matter.
_WORK = 60_000


def _piece() -> None:
    total = 0
    for i in range(_WORK):
        total += i * i
    if total < 0:  # never true: keeps the loop from being skipped
        raise AssertionError


Samples = list[tuple[float, float]]


def _measure(cpu: int, seconds: float, out: multiprocessing.Queue[Samples]) -> None:
    """On ``cpu`` only: (end time, seconds taken) of each piece for ``seconds``."""
    os.sched_setaffinity(0, {cpu})
    samples: Samples = []
    deadline = time.monotonic() + seconds
    while (now := time.monotonic()) < deadline:
        _piece()
        end = time.monotonic()
        samples.append((end, end - now))
    out.put(samples)


def _speeds(per_cpu: list[Samples], start: float, bucket: float) -> list[float]:
    """The machine's relative speed in each ``bucket``-second slot: per core,
    fastest piece / mean piece in the slot; then the mean over the cores."""
    slots: dict[int, list[float]] = {}
    for samples in per_cpu:
        fastest = min(took for _, took in samples)
        mine: dict[int, list[float]] = {}
        for end, took in samples:
            mine.setdefault(int((end - start) / bucket), []).append(took)
        for slot, times in mine.items():
            slots.setdefault(slot, []).append(fastest / statistics.fmean(times))
    return [statistics.fmean(slots[k]) for k in sorted(slots) if len(slots[k]) == len(per_cpu)]


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--windows", type=float, nargs="+", default=[1.0, 2.0, 5.0, 10.0])
    parser.add_argument("--series", action="store_true", help="also print each window's speed")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    queue: multiprocessing.Queue[Samples] = multiprocessing.Queue()
    start = time.monotonic()
    workers = [
        multiprocessing.Process(target=_measure, args=(cpu, args.seconds, queue)) for cpu in cpus
    ]
    for worker in workers:
        worker.start()
    per_cpu = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    pieces = sum(len(s) for s in per_cpu)
    print(f"{len(cpus)} core(s), {args.seconds:.0f} s, {pieces:,} pieces of work")
    for window in args.windows:
        speeds = _speeds(per_cpu, start, window)
        print(
            f"  {window:5.1f} s windows: n={len(speeds):4d}  speed CV {100 * _cv(speeds):5.1f}%"
            f"  (slowest {100 * min(speeds):.0f}%, fastest {100 * max(speeds):.0f}%"
            " of the best piece)"
        )
        if args.series:
            print("   ", " ".join(f"{100 * s:.0f}" for s in speeds))


if __name__ == "__main__":
    main()
