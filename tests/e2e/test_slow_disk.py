"""A slow disk during a write load on each kind: ``slow_disk`` makes every
fsync of the member's data directory 20 ms longer, through the layer the
agent mounted before the member started, and ``restore_disk`` brings it
back; nothing stays mounted after a run, nor after a Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dbtester.agent.disk_layer import mounted
from dbtester.results.requests import Records
from tests.support.cases import database, fast_elections, make_case, write_case
from tests.support.cluster import VERSIONS, finish, run_case, start_run, wait_for_text

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.path.exists("/dev/fuse") or os.geteuid() != 0,
        reason="the slow-disk layer mounts FUSE: it needs /dev/fuse and root",
    ),
]

#: 100 writes/s for 7 s, open loop; the disk is slow from 2.5 s to 5 s
WORKLOAD = {"type": "write", "requests": 700, "rate": 100, "clients": 10, "connections": 2}
FAULTS = [
    {"at": "2.5s", "action": "slow_disk", "member": 0, "fsync_ms": 20},
    {"at": "5s", "action": "restore_disk"},
]
KINDS = ("etcd", "zookeeper", "consul")


def _home(installed_home: Any) -> Path:
    for kind in KINDS:
        home = Path(installed_home(kind, VERSIONS[kind]))
    return home


def _p50_ms(out: Path, db: str, begin: float, end: float) -> float:
    """The median latency of the writes due from ``begin`` to ``end`` s into the load."""
    started = json.loads((out / db / "run.json").read_text())["load"]["started_unix"]
    records = Records.load(out / db / "client-latency.npz")
    due = records.due_ns / 1e9 - started
    chosen = (due >= begin) & (due < end) & (records.code == 0)
    assert chosen.sum() > 100, (db, int(chosen.sum()))
    return float(np.median(records.latency_ns[chosen])) / 1e6


def _left_mounted(run_id: str) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines if run_id in line.split()[4]]


def test_a_slow_disk_slows_each_kind_and_restoring_it_brings_it_back(
    tmp_path: Path, installed_home: Any
) -> None:
    home = _home(installed_home)
    case = make_case(
        title="e2e slow disk",
        workload=WORKLOAD,
        # Consul's one member elects itself 7 s sooner at production timing
        databases=[database(kind, kind, **fast_elections(kind)) for kind in KINDS],
        faults=FAULTS,
    )
    result, out = run_case(home, case, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "result.json").read_text())
    for db in summary["databases"]:
        kind = db["id"]
        figures = db["figures"]
        assert figures["FAULT-1"] == "slow_disk member 0 by 20 ms at 2.5 s, restore_disk at 5 s"
        slow, restore = json.loads((out / kind / "run.json").read_text())["faults"]
        assert slow["fsync_ms"] == 20 and not slow["error"] and not restore["error"]
        before = _p50_ms(out, kind, 0.5, 2.3)
        during = _p50_ms(out, kind, 3.0, 4.8)
        after = _p50_ms(out, kind, 5.5, 6.9)
        # Every write waits for at least one fsync of its member. Precision:
        # the layer sleeps with ms precision, and a busy machine adds its own
        # ms; 15 of the 20 ms is the bound (the issue's), and "back" is within
        # 10 ms of before.
        assert during - before >= 15, (kind, before, during)
        assert after - before < 10, (kind, before, after)
        assert figures["KEYS-VERIFIED"] == "700 / 700 OK", (kind, figures["KEYS-VERIFIED"])
    assert _left_mounted(summary["run_id"]) == []


def test_ctrl_c_leaves_nothing_mounted(tmp_path: Path, installed_home: Any) -> None:
    home = installed_home("etcd", VERSIONS["etcd"])
    case = make_case(
        title="e2e slow disk interrupted",
        workload=WORKLOAD | {"requests": 100_000},
        databases=[database("etcd")],
        faults=[{"at": "1s", "action": "slow_disk", "member": 0, "fsync_ms": 20}],
    )
    log = tmp_path / "run.log"
    out = tmp_path / "out"
    run = start_run(home, write_case(tmp_path / "case.yaml", case), out, log)
    try:
        wait_for_text(log, "slow_disk member 0 at 1 s")
        run_id = json.loads((out / "result.json").read_text())["run_id"]
        (data,) = _left_mounted(run_id)  # the member's, slowed
        os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        code = finish(run, timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 130, text[-3000:]
    assert data.endswith("/etcd/member-0/data") and not mounted(Path(data))
    assert _left_mounted(run_id) == []
