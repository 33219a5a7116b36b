"""What the load engine costs per request for each database kind, and its
memory on a long run.

For each kind: a fresh single-member server on loopback (the kind's own launch
plan, run directly), then writes of distinct keys and reads of one key, with
100 clients over 10 connections, 256-byte keys and 1 KB values. Prints
throughput and the client's CPU in microseconds per request (user + system of
this process while the load ran), and per kind the ratio to etcd's, so a
cross-database table is seen to compare databases, not clients.

    python benchmarks/engine_cost.py [--requests 20000] [--rounds 3] [--kinds etcd zookeeper consul]
    python benchmarks/engine_cost.py --memory 3000000   # peak RSS of a 3M-request read run
    python benchmarks/engine_cost.py --kubernetes [--requests 20000]   # etcd: put, range, each verb
    python benchmarks/engine_cost.py --locks [--requests 20000]   # etcd: acquisition, keep-alive

With --kubernetes, on etcd only: the same put and range beside each verb of
type: kubernetes alone (get, list, create, update, delete; 2 KB objects;
lists of 1,000 objects, two pages of 500), interleaved round by round.

With --locks, on etcd only: put beside an acquisition of type: lock (100
lockers over 1,000 locks, held 0 ms: acquire, then release), and a
keep-alive: the CPU of 1,000 lockers taking one acquisition each over 12 s,
their leases of 3 s kept alive every second, less that of the same run with
leases of an hour (none kept alive within it), per keep-alive sent.

Run it alone on the machine: client and server share the cores.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fresh import Figure, FreshServer, workload
from dbtester.databases.base import LoadSettings
from dbtester.load import LoadOptions, run_load, seed_key
from dbtester.load.runner import load_keys
from dbtester.results import DatabaseLayout
from dbtester.workloads import workload_of

KEY_SIZE, VALUE_SIZE, CLIENTS, CONNECTIONS = 256, 1024, 100, 10
VERSIONS = {"etcd": "3.5.17", "zookeeper": "3.8.0", "consul": "1.22.0"}


def measure(kind: str, op: str, requests: int, out: Path) -> tuple[Figure, float]:
    """One run's figures, and the process's peak RSS (MB) when the load was done."""
    server = FreshServer(kind, VERSIONS[kind], CONNECTIONS)
    try:
        settings = LoadSettings((server.endpoint,), {}, KEY_SIZE, VALUE_SIZE, "serializable", 10.0)
        if op == "read":
            seed_key(kind, settings)
        load = workload(op == "write", requests, (KEY_SIZE, VALUE_SIZE), CLIENTS, CONNECTIONS)
        result = run_load(kind, settings, load, DatabaseLayout(out), LoadOptions(progress=None))
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finally:
        server.stop()
    if result.errors:
        raise SystemExit(f"{kind} {op}: errors {result.records.counts()}")
    records = result.records
    # The last reply, a million at a time: no temporary as big as the records.
    last = max(
        int((records.due_ns[i : i + 1_000_000] + records.latency_ns[i : i + 1_000_000]).max())
        for i in range(0, len(records), 1_000_000)
    )
    span = last - int(records.due_ns.min())
    return Figure(kind, op, requests, span / 1e9, result.cpu_seconds), peak_mb


def cost(kinds: list[str], requests: int, rounds: int) -> None:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(rounds):
            # Interleaved: every kind once per round, the order turning each round.
            order = kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]
            for kind in order:
                for op in ("write", "read"):
                    figure, _ = measure(kind, op, requests, Path(scratch) / f"{round_}-{kind}-{op}")
                    figures.append(figure)
                    print(
                        f"round {round_ + 1} {kind:9} {op:5} {figure.rate:9,.0f} req/s"
                        f"  {figure.us_per_request:6.1f} us CPU/request",
                        flush=True,
                    )
    print()
    for op in ("write", "read"):
        etcd = [f.us_per_request for f in figures if f.op == op and f.who == "etcd"]
        base = statistics.median(etcd) if etcd else 0.0
        for kind in kinds:
            mine = [f for f in figures if f.op == op and f.who == kind]
            us = statistics.median(f.us_per_request for f in mine)
            rate = statistics.median(f.rate for f in mine)
            versus = f", {us / base:.2f}x etcd's" if base else ""
            print(f"{op:5} {kind:9}: {rate:9,.0f} req/s  {us:6.1f} us CPU/request{versus}")


#: type: kubernetes: each verb alone, on etcd
VERBS = ("get", "list", "create", "update", "delete")
OBJECT_SIZE, LISTED = 2048, 1000


def measure_verb(verb: str, requests: int, out: Path) -> Figure:
    """One verb of Kubernetes' traffic alone against a fresh etcd: creates
    and deletes over twice `requests` objects (the count never reaches its
    bounds), lists over LISTED objects."""
    server = FreshServer("etcd", VERSIONS["etcd"], CONNECTIONS)
    shares = {f"{v}_proportion": float(v == verb) for v in VERBS}
    objects = LISTED if verb == "list" else 2 * requests
    load = workload_of(
        type="kubernetes",
        requests=requests,
        objects=objects,
        object_size=OBJECT_SIZE,
        clients=CLIENTS,
        connections=CONNECTIONS,
        **shares,
    )
    try:
        settings = LoadSettings((server.endpoint,), {}, 256, OBJECT_SIZE, "linearizable", 10.0)
        load_keys("etcd", settings, load, LoadOptions(progress=None))
        result = run_load("etcd", settings, load, DatabaseLayout(out), LoadOptions(progress=None))
    finally:
        server.stop()
    if result.errors:
        raise SystemExit(f"etcd {verb}: errors {result.records.counts()}")
    records = result.records
    span = int((records.due_ns + records.latency_ns).max() - records.due_ns.min())
    return Figure("etcd", verb, requests, span / 1e9, result.cpu_seconds)


def kubernetes(requests: int, rounds: int) -> None:
    """Put and range beside each verb, interleaved; medians per operation."""
    figures: list[Figure] = []
    ops = ("write", "read", *VERBS)
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(rounds):
            order = ops[round_ % len(ops) :] + ops[: round_ % len(ops)]
            for op in order:
                out = Path(scratch) / f"{round_}-{op}"
                if op in VERBS:
                    figure = measure_verb(op, requests, out)
                else:
                    figure, _ = measure("etcd", op, requests, out)
                figures.append(figure)
                print(
                    f"round {round_ + 1} {op:6} {figure.rate:9,.0f} req/s"
                    f"  {figure.us_per_request:6.1f} us CPU/request",
                    flush=True,
                )
    print()
    put = statistics.median(f.us_per_request for f in figures if f.op == "write")
    for op in ops:
        mine = [f for f in figures if f.op == op]
        us = statistics.median(f.us_per_request for f in mine)
        rate = statistics.median(f.rate for f in mine)
        print(f"{op:6}: {rate:9,.0f} req/s  {us:6.1f} us CPU/request, {us / put:.2f}x put's")


#: type: lock's cost: lockers and locks of an acquisition's run; the idle
#: lockers, their run's length and their short TTL of a keep-alive's
LOCKERS, LOCKS = 100, 1000
IDLE_LOCKERS, IDLE_S, SHORT_TTL_S = 1000, 12.0, 3


def measure_lock(requests: int, ttl_s: int, out: Path, lockers: int, rate: float = 0.0) -> Figure:
    """A lock load against a fresh etcd: ``requests`` acquisitions by ``lockers``."""
    server = FreshServer("etcd", VERSIONS["etcd"], CONNECTIONS)
    load = workload_of(
        type="lock",
        requests=requests,
        lockers=lockers,
        locks=LOCKS,
        hold_ms=0,
        ttl=ttl_s,
        rate=rate,
        request_timeout_s=30,
    )
    try:
        settings = LoadSettings((server.endpoint,), {}, 256, 0, "linearizable", 10.0)
        result = run_load("etcd", settings, load, DatabaseLayout(out), LoadOptions(progress=None))
    finally:
        server.stop()
    if result.errors:
        raise SystemExit(f"etcd lock: errors {result.records.counts()}")
    records = result.records
    span = int((records.due_ns + records.latency_ns).max() - records.due_ns.min())
    return Figure("etcd", "acquire", requests, span / 1e9, result.cpu_seconds)


def locks(requests: int, rounds: int) -> None:
    """Put, an acquisition, and idle lockers with short and long TTLs,
    interleaved; medians, and a keep-alive's cost from the idle pair."""
    put: list[float] = []
    acquire: list[Figure] = []
    keep_alive: list[float] = []
    # one acquisition per locker over the run: every locker opens its session
    idle, idle_rate = IDLE_LOCKERS, IDLE_LOCKERS / IDLE_S
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(rounds):
            out = Path(scratch) / str(round_)
            figure, _ = measure("etcd", "write", requests, out / "put")
            put.append(figure.us_per_request)
            acquired = measure_lock(requests, 60, out / "acquire", LOCKERS)
            acquire.append(acquired)
            short, long = (
                measure_lock(idle, ttl, out / f"idle-{ttl}", IDLE_LOCKERS, rate=idle_rate)
                for ttl in (SHORT_TTL_S, 3600)
            )
            # keep-alives every TTL / 3 = 1 s for each locker through the run
            sent = IDLE_LOCKERS * short.seconds * 3 / SHORT_TTL_S
            keep_alive.append(1e6 * (short.cpu_s - long.cpu_s) / sent)
            print(
                f"round {round_ + 1}: put {figure.us_per_request:5.1f} us CPU/request,"
                f" acquire {acquired.us_per_request:5.1f} us ({acquired.rate:,.0f}/s),"
                f" keep-alive {keep_alive[-1]:5.2f} us",
                flush=True,
            )
    base = statistics.median(put)
    us = statistics.median(f.us_per_request for f in acquire)
    rate = statistics.median(f.rate for f in acquire)
    print()
    print(f"put:        {base:6.1f} us CPU/request")
    print(f"acquire:    {us:6.1f} us CPU/acquisition ({rate:,.0f}/s), {us / base:.2f}x put's")
    print(f"keep-alive: {statistics.median(keep_alive):6.2f} us CPU each")


def memory(requests: int) -> None:
    """A read run of ``requests`` against one etcd: this process's peak RSS."""
    with tempfile.TemporaryDirectory() as scratch:
        figure, peak_mb = measure("etcd", "read", requests, Path(scratch))
    print(
        f"{requests:,} reads: {figure.rate:,.0f} req/s, {figure.us_per_request:.1f} us"
        f" CPU/request; peak RSS of the process through the load {peak_mb:,.0f} MB;"
        f" records 27 bytes/request"
        f" ({27 * requests / 1e6:,.0f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", default=list(VERSIONS), choices=list(VERSIONS))
    parser.add_argument("--memory", type=int, default=0, metavar="REQUESTS")
    parser.add_argument("--kubernetes", action="store_true", help="etcd: put, range and each verb")
    parser.add_argument("--locks", action="store_true", help="etcd: an acquisition, a keep-alive")
    args = parser.parse_args()
    if args.kubernetes:
        kubernetes(args.requests, args.rounds)
    elif args.locks:
        locks(args.requests, args.rounds)
    elif args.memory:
        memory(args.memory)
    else:
        cost(args.kinds, args.requests, args.rounds)


if __name__ == "__main__":
    main()
