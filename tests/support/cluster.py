"""Real databases for the integration and end-to-end tests: the versions they
install, a cluster on loopback agents, waiting until it serves, and the
``dbtester`` command run as a subprocess (or as from a terminal)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from dbtester.agent.client import AgentClient
from dbtester.control.access import MembersAccess, issue
from dbtester.databases import KINDS
from dbtester.databases.base import PLAIN, Access, LoadSettings, Peer
from tests.integration.agents import agents, loopback_peers
from tests.support.poll import poll_until

__all__ = [
    "AS_FROM_A_TERMINAL",
    "KINE",
    "NATS",
    "VERSIONS",
    "b64",
    "cluster",
    "dbtester",
    "finish",
    "post",
    "reap",
    "run_case",
    "settings_for",
    "start_run",
    "wait_for_text",
    "wait_serving",
]

#: the version of each kind the tests install (``make test-databases``)
VERSIONS = {"etcd": "3.5.17", "zookeeper": "3.8.0", "consul": "1.22.0"}
#: kine's, apart: one process, it joins only the tests written for it
KINE = "0.17.5"
#: NATS's, apart likewise: it joins only the tests written for it
NATS = "2.15.2"


def post(url: str, body: dict[str, object] | None = None, method: str = "POST") -> bytes:
    """An HTTP request with a JSON body; the reply's bytes."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return bytes(reply.read())


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def wait_serving(kind: str, peers: list[Peer], timeout: float = 90, access: Access = PLAIN) -> None:
    """Until every member serves (AssertionError after ``timeout`` s)."""
    poll_until(
        lambda: all(KINDS[kind].serving(p, access=access) for p in peers),
        timeout,
        interval_s=0.25,
        message=f"{kind} cluster not serving",
    )


@contextmanager
def cluster(
    kind: str,
    members: int,
    tmp: Path,
    home: str,
    flags: dict[str, object] | None = None,
    tls_in: Path | None = None,
    auth: bool = False,
) -> Iterator[tuple[list[Peer], list[AgentClient]]]:
    """A ``members``-member cluster of ``kind`` on loopback agents, serving;
    with ``tls_in``, over TLS, a client's files (ca.pem, client.pem,
    client-key.pem) in that folder; with ``auth``, started for
    authentication (its user is the caller's to set up). Without ``flags``,
    Consul elects at production timing (tests.support.cases.FAST_CONSUL):
    its default waits about 5 s for a first leader."""
    if flags is None and kind == "consul":
        flags = {"raft_multiplier": 1}
    peers = loopback_peers(kind, members)
    tls = issue(kind, peers, tls_in) if tls_in else MembersAccess()
    with agents(tmp, members, home=home) as running:
        clients = [agent.client() for agent in running]
        for i, client in enumerate(clients):
            client.start(
                run_id="load",
                database_id=kind,
                kind=kind,
                version=VERSIONS[kind],
                member_index=i,
                peers=peers,
                flags=dict(flags or {}),
                tls=tls.identity(i),
                auth=auth,
            )
        wait_serving(kind, peers, access=tls.access)
        yield peers, clients


def settings_for(peers: list[Peer], **extra: object) -> LoadSettings:
    """Load settings against ``peers``' client ports; ``extra`` overrides."""
    base: dict[str, object] = dict(
        endpoints=tuple(p.address("client") for p in peers),
        client={},
        key_size=64,
        value_size=256,
        consistency="linearizable",
        timeout_s=5.0,
    )
    base.update(extra)
    return LoadSettings(**base)  # type: ignore[arg-type]


def dbtester(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python -m dbtester ARGS`` with DBTESTER_HOME=``home``, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "dbtester", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "DBTESTER_HOME": str(home)},
        check=False,
    )


def run_case(
    home: Path | str, case: Mapping[str, Any], folder: Path, timeout: float = 900
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``case`` written to FOLDER/case.yaml and run by ``dbtester run
    --no-charts`` into FOLDER/results, to its end: the process, and the
    results directory. (The tests that run a case this way look at no chart:
    drawing them is most of a run's rendering.)"""
    from tests.support.cases import write_case  # (cases imports this module)

    folder.mkdir(parents=True, exist_ok=True)
    config = write_case(folder / "case.yaml", case)
    out = folder / "results"
    args = ("run", "--no-charts", str(config), "--out", str(out))
    return dbtester(Path(home), *args, timeout=timeout), out


# `python -m dbtester` as started from a terminal: a shell's background job
# (`nohup ... &`, as scripts run CI) starts with SIGINT ignored, and Python then
# never turns Ctrl-C into KeyboardInterrupt.
AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys;"
    " signal.signal(signal.SIGINT, signal.default_int_handler);"
    " sys.argv[0] = 'dbtester';"
    " runpy.run_module('dbtester', run_name='__main__')"
)


def start_run(
    home: str, config: Path, out: Path, log: Path, **env_extra: str
) -> subprocess.Popen[bytes]:
    """``dbtester run --no-charts CONFIG --out OUT`` as from a terminal, in a
    session of its own, its stderr into ``log`` (no test that starts a run
    this way looks at charts: drawing them is most of a run's rendering)."""
    env = {**os.environ, "DBTESTER_HOME": home, **env_extra}
    with log.open("wb") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                AS_FROM_A_TERMINAL,
                "run",
                "--no-charts",
                str(config),
                "--out",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            start_new_session=True,
        )


def wait_for_text(log: Path, text: str, timeout: float = 120) -> None:
    """Until ``text`` is in ``log``."""
    poll_until(
        lambda: text in log.read_text(),
        timeout,
        interval_s=0.1,
        message=lambda: f"never saw {text!r}:\n{log.read_text()[-2000:]}",
    )


def finish(run: subprocess.Popen[bytes], timeout: float = 300) -> int:
    """The run's exit code; its group killed if it takes over ``timeout`` s."""
    try:
        return run.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        raise


def reap(run: subprocess.Popen[bytes], pids: list[int]) -> None:
    """After a failed test: the run's group, then every PID it started by its own
    (databases run in sessions of their own), so later tests find free ports."""
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
