"""A ``dbtester run`` driven from outside, phase by phase: a test case of
one-member etcd databases written, the run started as from a terminal (so
Ctrl-C is a KeyboardInterrupt), a phase's line awaited in its log, a
database's agent found among its processes, the run finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import psutil
import yaml

from tests.support.poll import poll_until

__all__ = ["ETCD", "agent_of", "finish", "start_run", "wait_for", "write_case"]

ETCD = "3.5.17"

# `python -m dbtester` as started from a terminal: a shell's background job
# (`nohup ... &`, as scripts run CI) starts with SIGINT ignored, and Python then
# never turns Ctrl-C into KeyboardInterrupt.
AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys;"
    " signal.signal(signal.SIGINT, signal.default_int_handler);"
    " sys.argv[0] = 'dbtester';"
    " runpy.run_module('dbtester', run_name='__main__')"
)


def write_case(
    path: Path,
    ids: list[str],
    requests: int,
    workload: Mapping[str, object] | None = None,
    **extra: object,
) -> Path:
    """A write case of one-member etcd databases named ``ids``; ``workload``
    adds workload keys, ``extra`` database keys."""
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
        "databases": [
            {"id": i, "kind": "etcd", "version": ETCD, "members": 1, **extra} for i in ids
        ],
    }
    path.write_text(yaml.safe_dump(case))
    return path


def start_run(
    home: str, config: Path, out: Path, log: Path, **env_extra: str
) -> subprocess.Popen[bytes]:
    """``dbtester run config --out out`` in a session of its own, its stderr
    into ``log``."""
    env = {**os.environ, "DBTESTER_HOME": home, **env_extra}
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", AS_FROM_A_TERMINAL, "run", str(config), "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            start_new_session=True,
        )


def wait_for(log: Path, text: str, timeout: float = 120) -> None:
    """Until the run's log says ``text`` (a phase began)."""
    poll_until(
        lambda: text in log.read_text(),
        timeout,
        interval_s=0.1,
        message=lambda: f"never saw {text!r}:\n{log.read_text()[-2000:]}",
    )


def agent_of(run: subprocess.Popen[bytes], db_id: str) -> psutil.Process:
    """The embedded agent of database ``db_id``'s first member."""
    for child in psutil.Process(run.pid).children(recursive=True):
        if f"/{db_id}/agent-0" in " ".join(child.cmdline()):
            return child
    raise AssertionError(f"no agent for {db_id}")


def finish(run: subprocess.Popen[bytes], timeout: float = 300) -> int:
    """The run's exit code; its whole session killed if it outlasts ``timeout``."""
    try:
        return run.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        raise
