"""What the load benchmarks share: a fresh single-member server on loopback
(the kind's own launch plan, run directly, stopped by PID) and one run's
figures."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.databases import get_kind
from dbtester.databases.base import MemberSpec, Peer
from dbtester.util.net import free_port
from dbtester.util.progress import Reporter
from dbtester.workloads import Workload, workload_of


def workload(
    write: bool, requests: int, size: tuple[int, int], clients: int, conns: int
) -> Workload:
    """Writes of distinct keys or serializable reads of one key; ``size`` is
    (key bytes, value bytes)."""
    return workload_of(
        type="write" if write else "read",
        requests=requests,
        key_size=size[0],
        value_size=size[1],
        clients=clients,
        connections=conns,
        consistency="serializable",
    )


@dataclass
class Figure:
    who: str  # the client (or the database kind) measured
    op: str
    requests: int
    seconds: float
    cpu_s: float  # the client's CPU, user + system

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def us_per_request(self) -> float:
        return 1e6 * self.cpu_s / self.requests


class FreshServer:
    """One member of ``kind`` at ``version`` in a temporary directory, its flags
    fitted to ``connections`` as a test case's would be."""

    def __init__(self, kind: str, version: str, connections: int) -> None:
        self.kind = get_kind(kind)
        installed = self.kind.install(version, Reporter())
        self.dir = Path(tempfile.mkdtemp(prefix="dbtester-bench-"))
        self.peer = Peer("m0", "127.0.0.1", {n: free_port() for n in self.kind.default_ports})
        flags, _ = self.kind.fit_flags(self.kind.flags_model(), connections)
        spec = MemberSpec(0, (self.peer,), flags, self.dir, self.dir / "data", "bench")
        plan = self.kind.launch(installed, spec)
        spec.data_dir.mkdir(parents=True)
        for path, text in plan.files.items():
            path.write_text(text)
        self.log = (self.dir / "server.log").open("wb")
        self.process = subprocess.Popen(plan.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self.kind.serving(self.peer):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"{kind} did not start; see {self.dir / 'server.log'}")
            time.sleep(0.1)

    @property
    def endpoint(self) -> str:
        return self.peer.address("client")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
