"""How fast does a run notice a dead agent? kill -9 of one embedded agent mid-load,
over several trials; prints each trial and the median and maximum.

    python benchmarks/fault_detection.py [--trials 10] [--version 3.5.17]

Detection time is from the kill to the moment the load stopped (run.json's
load.ended_unix); the budget is 3 missed heartbeats (1 s each) + 1 s. Each
trial also checks that the dead agent's etcd did not outlive it and that the
run exited 1 naming the agent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

BUDGET_S = 3 * 1.0 + 1.0


def _case(path: Path, version: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "title": "fault detection",
                "workload": {
                    "type": "write",
                    "requests": 200000,
                    "key_size": 64,
                    "value_size": 256,
                    "clients": 20,
                    "connections": 4,
                },
                "databases": [{"id": "doomed", "kind": "etcd", "version": version, "members": 1}],
            }
        )
    )


def trial(root: Path, version: str) -> float:
    config = root / "case.yaml"
    _case(config, version)
    log = root / "run.log"
    with log.open("wb") as err:
        run = subprocess.Popen(
            [sys.executable, "-m", "dbtester", "run", str(config), "--out", str(root / "out")],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "doomed: write load" not in log.read_text():
            if time.monotonic() > deadline or run.poll() is not None:
                raise SystemExit(f"the run did not start its load:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        time.sleep(1.0)
        children = psutil.Process(run.pid).children(recursive=True)
        agent = next(p for p in children if "serve" in p.cmdline())
        etcd = [p for p in agent.children(recursive=True) if p.name() == "etcd"]
        killed_at = time.time()
        agent.send_signal(signal.SIGKILL)
        code = run.wait(300)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    record = json.loads((root / "out" / "doomed" / "run.json").read_text())
    assert code == 1, f"exit {code}"
    assert "not answering" in record["error"] or "stopped answering" in record["error"]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in etcd)
    return float(record["load"]["ended_unix"]) - killed_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--version", default="3.5.17")
    args = parser.parse_args()
    times = []
    for i in range(args.trials):
        with tempfile.TemporaryDirectory(prefix="dbtester-fault-") as tmp:
            seconds = trial(Path(tmp), args.version)
        times.append(seconds)
        print(f"trial {i + 1:2d}: detected in {seconds:.2f} s", flush=True)
    print(
        f"kill -9 of an agent, {len(times)} trials: median {statistics.median(times):.2f} s,"
        f" max {max(times):.2f} s (budget {BUDGET_S:.1f} s)"
    )


if __name__ == "__main__":
    main()
