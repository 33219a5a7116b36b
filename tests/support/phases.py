"""A ``dbtester run`` driven from outside, phase by phase: a test case of
one-member etcd databases written, the run started as from a terminal (so
Ctrl-C is a KeyboardInterrupt), a phase's line awaited in its log, a
database's agent found among its processes, the run finished."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import psutil
import yaml

__all__ = ["ETCD", "agent_of", "write_case"]

ETCD = "3.5.17"


def write_case(
    path: Path,
    ids: list[str],
    requests: int,
    workload: Mapping[str, object] | None = None,
    *,
    after: int | None = None,
    **extra: object,
) -> Path:
    """A write case of one-member etcd databases named ``ids``; ``workload``
    adds workload keys, ``extra`` database keys. ``after``: the requests of
    every database but the first (one that only shows the run goes on)."""
    databases: list[dict[str, object]] = [
        {"id": i, "kind": "etcd", "version": ETCD, "members": 1, **extra} for i in ids
    ]
    if after is not None:
        for entry in databases[1:]:
            entry["workload"] = {"requests": after}
    case = {
        "title": "faults",
        "workload": {
            "type": "write",
            "requests": requests,
            "key_size": 64,
            "value_size": 256,
            "clients": 20,
            "connections": 4,
            **(workload or {}),
        },
        "databases": databases,
    }
    path.write_text(yaml.safe_dump(case))
    return path


def agent_of(run: subprocess.Popen[bytes], db_id: str) -> psutil.Process:
    """The embedded agent of database ``db_id``'s first member."""
    for child in psutil.Process(run.pid).children(recursive=True):
        if f"/{db_id}/agent-0" in " ".join(child.cmdline()):
            return child
    raise AssertionError(f"no agent for {db_id}")
