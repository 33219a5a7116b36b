"""How long does the register checker take, and how much memory, for the
history issue 29 sizes: 8 checked clients x 10,000 operations on 8 keys?

Simulates a linearizable register per key (each operation takes effect at
a random moment inside its interval, so reads return what the register held
then), half reads and half writes, with 1% of the writes of unknown outcome,
then runs the real checker and prints the wall time, the peak RSS and the
verdicts. The history is built first; the figures are the check's alone.

    python benchmarks/check_speed.py [--clients 8] [--operations 10000] [--keys 8]
"""

from __future__ import annotations

import argparse
import heapq
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.analyze.linearizable import INITIAL, Operation, check_history


def simulate(clients: int, operations: int, keys: int, seed: int = 7) -> list[Operation]:
    """Each client's operations back to back, each taking effect at a random
    point of its interval, applied in that order to one register per key."""
    rng = random.Random(seed)
    # (effect time, order, the op without its read's value yet)
    planned: list[tuple[int, int, Operation]] = []
    value = INITIAL
    for client in range(clients):
        now = rng.randint(0, 1000)
        for _ in range(operations):
            start = now + rng.randint(10, 1000)
            end = start + rng.randint(100, 5000)
            effect = rng.randint(start, end)
            key = rng.randrange(keys)
            if rng.random() < 0.5:
                value += 1
                unknown = rng.random() < 0.01
                op = Operation(
                    client,
                    key,
                    "write",
                    value,
                    start,
                    None if unknown else end,
                    "unknown" if unknown else "ok",
                )
            else:
                op = Operation(client, key, "read", INITIAL, start, end)
            heapq.heappush(planned, (effect, len(planned), op))
            now = end
    held = dict.fromkeys(range(keys), INITIAL)
    history = []
    while planned:
        _, _, op = heapq.heappop(planned)
        if op.kind == "write":
            held[op.key] = op.value
            history.append(op)
        else:
            history.append(
                Operation(op.client, op.key, "read", held[op.key], op.invoked_ns, op.completed_ns)
            )
    return history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--operations", type=int, default=10_000, help="per client")
    parser.add_argument("--keys", type=int, default=8)
    args = parser.parse_args()
    history = simulate(args.clients, args.operations, args.keys)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    found = check_history(history)
    took = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    clean = sum(k.linearizable for k in found)
    print(
        f"{len(history):,} operations on {len(found)} keys checked in {took:.2f} s;"
        f" {clean} of {len(found)} keys linearizable; peak RSS {peak / 1024:.0f} MB"
        f" ({before / 1024:.0f} MB with the history built)"
    )


if __name__ == "__main__":
    main()
