"""The load engine's instructions per etcd request, counted by valgrind
(callgrind), so that two builds of the engine can be compared on a busy
machine: CPU time is noisy there, instruction counts are not.

A fresh single-member etcd on loopback runs natively; the engine runs under
callgrind in a child Python process, once with ``--requests`` LOW and once with
HIGH requests, and the difference divided by HIGH - LOW is the cost of one
request (startup, connecting and teardown cancel out). The workload is the one
vs_etcd_benchmark.py runs: 1000 clients over 100 connections, puts of distinct
256-byte keys with 1 KB values, and serializable ranges of one key. Only the
engine's own process is counted, user space only (no kernel time).

With ``--cpu`` the child runs natively instead, HIGH requests, and the figure
is its CPU time per request, user and system (what the kernel spends on its
syscalls, which callgrind does not see): noisy on a busy machine, so compare
builds over several rounds.

    python benchmarks/engine_instructions.py [--engines A.so B.so] [--rounds 3]
        [--ops put range] [--requests 2000 12000]
    python benchmarks/engine_instructions.py --cpu --requests 0 100000 [--engines ...]
    python benchmarks/engine_instructions.py --keep DIR ...   # profiles for callgrind_annotate

``--engines`` takes builds of the engine's library (``lib_engine.so`` from
``cargo build --release --features extension-module`` in engine/, copied
aside); without it, the installed ``dbtester/_engine*.so`` is measured. With
several, each round runs them in turn (A B, then B A, ...) and the summary gives
each one's median and its ratio to the first.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KEY_SIZE, VALUE_SIZE, CLIENTS, CONNECTIONS = 256, 1024, 1000, 100
VERSION = "3.5.17"


def engine_plan(endpoint: str, op: str, requests: int) -> dict[str, Any]:
    """The plan vs_etcd_benchmark.py has dbtester build for ``op``."""
    read = op == "range"
    return {
        "protocol": "etcd",
        "endpoints": [endpoint],
        "options": {"balancer": "pick_first"},
        "key_size": KEY_SIZE,
        "value_size": VALUE_SIZE,
        "values": "fixed",
        "keys": {
            "existing": 1 if read else 0,
            "first": 0,
            "choose": "same",
            "inserts": "permuted",
            "insert_space": 0 if read else requests,
            "zipfian_constant": 0.99,
            "hot_set_fraction": 0.2,
            "hot_operation_fraction": 0.8,
        },
        "mix": {
            "read": 1.0 if read else 0.0,
            "update": 0.0,
            "insert": 0.0 if read else 1.0,
            "read_modify_write": 0.0,
        },
        "seed": 1,
        "write_id_base": 0,
        "consistency": "serializable",
        "timeout_s": 30.0,
        "steps": [
            {"clients": CLIENTS, "connections": CONNECTIONS, "requests": requests, "rate": 0.0}
        ],
        "threads": 1,
        "max_errors": None,
    }


def legacy_plan(endpoint: str, op: str, requests: int) -> dict[str, Any]:
    """The same plan in the form engines before the typed plan (results
    schema 5) took, so a build from before it can be measured beside a new one."""
    read = op == "range"
    plan = engine_plan(endpoint, op, requests)
    for key in ("values", "keys", "mix", "write_id_base"):
        del plan[key]
    plan.update(
        operation="read" if read else "write",
        key_space=requests,
        sequential_keys=False,
        same_key=read,
    )
    return plan


def start(module: Any, endpoint: str, op: str, requests: int) -> Any:
    """Starts the load on ``module``, in the plan form it takes."""
    try:
        return module.start(engine_plan(endpoint, op, requests))
    except ValueError as exc:
        if "unknown key" not in str(exc):
            raise
        return module.start(legacy_plan(endpoint, op, requests))


def child(engine: Path, endpoint: str, op: str, requests: int) -> None:
    """Runs one load with the engine library at ``engine`` and prints the CPU
    time it took ("cpu USER SYS", in seconds)."""
    # The library's init function is PyInit__engine: the module must be named _engine.
    loader = importlib.machinery.ExtensionFileLoader("_engine", str(engine))
    spec = importlib.util.spec_from_file_location("_engine", engine, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    before = resource.getrusage(resource.RUSAGE_SELF)
    load = start(module, endpoint, op, requests)
    while not load.wait(1.0):
        pass
    result = load.result()
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"cpu {after.ru_utime - before.ru_utime} {after.ru_stime - before.ru_stime}")
    codes = result["codes"]
    if len(result["code"]) != requests or result["code"].any():
        counts = {codes[c]: int((result["code"] == c).sum()) for c in range(len(codes))}
        raise SystemExit(f"{op}: {len(result['code'])} of {requests} recorded: {counts}")


#: numpy's OpenBLAS starts a thread server that spins a varying while; under
#: callgrind it added -450 to +1,350 instructions per request to the engine's
#: count (a put is about 32,000), more than the differences being measured.
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _child_env() -> dict[str, str]:
    return {**os.environ, **CHILD_ENV}


def instructions(
    engine: Path, endpoint: str, op: str, requests: int, scratch: Path, keep: Path | None
) -> int:
    """Instructions the child process ran (every thread, user space). With
    ``keep``, the callgrind profile stays there (for callgrind_annotate)."""
    out = (keep or scratch) / f"callgrind.{engine.stem}.{op}.{requests}"
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        str(engine),
        endpoint,
        op,
        str(requests),
    ]
    run = subprocess.run(argv, capture_output=True, text=True, check=False, env=_child_env())
    if run.returncode != 0:
        raise SystemExit(f"the child failed:\n{run.stderr[-3000:]}")
    match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no totals in {out}")
    if keep is None:
        out.unlink()
    return int(match.group(1))


def cpu_seconds(engine: Path, endpoint: str, op: str, requests: int) -> tuple[float, float]:
    """The child's CPU time through the load, user and system, run natively."""
    argv = [sys.executable, __file__, "--child", str(engine), endpoint, op, str(requests)]
    run = subprocess.run(argv, capture_output=True, text=True, check=False, env=_child_env())
    match = re.search(r"^cpu (\S+) (\S+)$", run.stdout, re.MULTILINE)
    if run.returncode != 0 or match is None:
        raise SystemExit(f"the child failed:\n{run.stderr[-3000:]}")
    return float(match.group(1)), float(match.group(2))


def installed_engine() -> Path:
    spec = importlib.util.find_spec("dbtester._engine")
    if spec is None or spec.origin is None:
        raise SystemExit("dbtester._engine is not built: make setup")
    return Path(spec.origin)


def seed(endpoint: str) -> None:
    from dbtester.databases.base import LoadSettings
    from dbtester.load.runner import seed_key

    seed_key("etcd", LoadSettings((endpoint,), {}, KEY_SIZE, VALUE_SIZE, "serializable", 30.0))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        library, endpoint, op, requests = sys.argv[2:6]
        child(Path(library), endpoint, op, int(requests))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", nargs="+", default=["put", "range"], choices=["put", "range"])
    parser.add_argument("--requests", nargs=2, type=int, default=[2000, 12000])
    parser.add_argument("--cpu", action="store_true", help="CPU time natively, not instructions")
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the callgrind profiles in this directory"
    )
    args = parser.parse_args()
    engines: list[Path] = args.engines or [installed_engine()]
    low, high = sorted(args.requests)

    from benchmarks.fresh import FreshServer

    per_request: dict[tuple[str, Path], list[float]] = {}
    server = FreshServer("etcd", VERSION, CONNECTIONS)
    try:
        seed(server.endpoint)
        with tempfile.TemporaryDirectory() as scratch:
            for round_ in range(args.rounds):
                turn = round_ % len(engines)
                for engine in engines[turn:] + engines[:turn]:
                    for op in args.ops:
                        if args.cpu:
                            user, system = cpu_seconds(engine, server.endpoint, op, high)
                            figure = 1e6 * (user + system) / high
                            shown = (
                                f"{figure:6.1f} us CPU/request (user {1e6 * user / high:.1f},"
                                f" system {1e6 * system / high:.1f})"
                            )
                        else:
                            counts = [
                                instructions(
                                    engine, server.endpoint, op, n, Path(scratch), args.keep
                                )
                                for n in (low, high)
                            ]
                            figure = (counts[1] - counts[0]) / (high - low)
                            shown = f"{figure:10,.0f} instructions/request"
                        per_request.setdefault((op, engine), []).append(figure)
                        print(f"round {round_ + 1} {op:5} {engine.name:20} {shown}", flush=True)
    finally:
        server.stop()
    print()
    unit = "us CPU/request" if args.cpu else "instructions/request"
    for op in args.ops:
        base = statistics.median(per_request[op, engines[0]])
        for engine in engines:
            mine = statistics.median(per_request[op, engine])
            shown = f"{mine:6.1f}" if args.cpu else f"{mine:10,.0f}"
            print(f"{op:5} {engine.name:20} median {shown} {unit} ({mine / base:.3f}x)")


if __name__ == "__main__":
    main()
