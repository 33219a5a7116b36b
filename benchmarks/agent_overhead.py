"""How much CPU does the agent itself use while it samples a database at 1 Hz?

Starts a real ``dbtester agent serve`` and, through it, a real etcd member on
loopback; measures the agent process's CPU time (user + system, all threads)
over a window while it samples, and prints it as a percentage of one core.
Target: under 1%.

    python benchmarks/agent_overhead.py [--seconds 60] [--version 3.5.17]

Run it alone on the machine: other load changes nothing in the agent's CPU
time, but keeps the figure honest about scheduler noise.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.databases import get_kind
from dbtester.util.progress import Reporter
from tests.integration.agents import loopback_peers, start_agent, stop_agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--version", default="3.5.17")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval (s)")
    args = parser.parse_args()
    get_kind("etcd").install(args.version, Reporter())
    with tempfile.TemporaryDirectory() as tmp:
        agent = start_agent(Path(tmp), token=secrets.token_hex(16))
        try:
            client = agent.client()
            client.start(
                run_id="bench",
                database_id="etcd",
                kind="etcd",
                version=args.version,
                member_index=0,
                peers=loopback_peers("etcd", 1),
                flags={},
                sample_interval_s=args.interval,
                heartbeat_timeout_s=args.seconds + 60,
            )
            process = psutil.Process(agent.process.pid)
            time.sleep(2.0)  # start-up work is not sampling overhead
            before, wall = process.cpu_times(), time.monotonic()
            time.sleep(args.seconds)
            after, elapsed = process.cpu_times(), time.monotonic() - wall
            samples = client.stop("bench", "etcd", 0).samples
        finally:
            stop_agent(agent)
    used = (after.user - before.user) + (after.system - before.system)
    print(
        f"agent CPU while sampling every {args.interval:g} s for {elapsed:.1f} s:"
        f" {used:.3f} CPU-seconds = {100 * used / elapsed:.3f}% of one core"
        f" ({1000 * used / max(samples, 1):.2f} ms per sample, {samples} samples)"
    )


if __name__ == "__main__":
    main()
