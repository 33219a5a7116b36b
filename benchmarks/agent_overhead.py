"""How much CPU does the agent itself use while it samples a database at 1 Hz?

Starts a real ``dbtester agent serve`` and, through it, a real etcd member on
loopback; measures the agent process's CPU time (user + system, all threads)
over a window while it samples, and prints it as a percentage of one core.
Target: under 1%. Then what the sampler's reading of the member's database
size costs the member itself: etcd's CPU time over ``--reads`` reads of its
/metrics (the endpoint the sampler reads dbSize and dbSizeInUse from), per
read and as a share of one core at one read a second.

    python benchmarks/agent_overhead.py [--seconds 60] [--version 3.5.17] [--reads 200]

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
from dbtester.databases.base import Peer
from dbtester.util.progress import Reporter
from dbtester.util.prometheus import read_gauges
from tests.integration.agents import loopback_peers, start_agent, stop_agent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--version", default="3.5.17")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval (s)")
    parser.add_argument("--reads", type=int, default=200, help="reads of the member's size")
    args = parser.parse_args()
    get_kind("etcd").install(args.version, Reporter())
    with tempfile.TemporaryDirectory() as tmp:
        agent = start_agent(Path(tmp), token=secrets.token_hex(16))
        try:
            client = agent.client()
            peers = loopback_peers("etcd", 1)
            started = client.start(
                run_id="bench",
                database_id="etcd",
                kind="etcd",
                version=args.version,
                member_index=0,
                peers=peers,
                flags={},
                sample_interval_s=args.interval,
                heartbeat_timeout_s=args.seconds + 60,
            )
            process = psutil.Process(agent.process.pid)
            time.sleep(2.0)  # start-up work is not sampling overhead
            before, wall = process.cpu_times(), time.monotonic()
            time.sleep(args.seconds)
            after, elapsed = process.cpu_times(), time.monotonic() - wall
            per_read = _size_read_cost(started.pid, peers[0], args.reads)
            samples = client.stop("bench", "etcd", 0).samples
        finally:
            stop_agent(agent)
    used = (after.user - before.user) + (after.system - before.system)
    print(
        f"agent CPU while sampling every {args.interval:g} s for {elapsed:.1f} s:"
        f" {used:.3f} CPU-seconds = {100 * used / elapsed:.3f}% of one core"
        f" ({1000 * used / max(samples, 1):.2f} ms per sample, {samples} samples)"
    )
    print(
        f"the member's CPU per read of its size (/metrics, {args.reads} reads):"
        f" {1000 * per_read:.2f} ms = {100 * per_read:.2f}% of one core at one read a second"
    )


def _size_read_cost(pid: int, peer: Peer, reads: int) -> float:
    """The member's CPU-seconds per read of its size, as the sampler reads it."""
    member = psutil.Process(pid)
    url = f"{peer.url('metrics')}/metrics"
    names = ("etcd_mvcc_db_total_size_in_bytes",)
    before = member.cpu_times()
    for _ in range(reads):
        read_gauges(url, names, 5.0)
    after = member.cpu_times()
    return ((after.user - before.user) + (after.system - before.system)) / reads


if __name__ == "__main__":
    main()
