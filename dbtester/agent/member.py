"""One running database member: start it, watch it, stop it within a bound.

The member runs in its own process group (``start_new_session``; see
agent/process_group.py), so stopping reaches every process it spawned, by PID
and process group, never by name; an isolation of its host is agent/isolation.py.
Its directory on the agent::

    <data_root>/runs/<run_id>/<database_id>/member-<i>/
        data/            the database's data (removed after a clean stop)
        data.disk/       its files while a slow-disk layer is mounted on data/
        slowfs.log       the layer's errors (agent/disk_layer.py)
        metrics.csv      one sample per second (see sampler.COLUMNS)
        database.log     the database's stdout and stderr
        agent.log        what the agent did for this member
        <config files>   zoo.cfg, consul.json ... as the kind writes them
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dbtester.agent.companion import CompanionProcess
from dbtester.agent.disk_layer import NO_LAYER, DiskLayer
from dbtester.agent.isolation import MemberIsolation
from dbtester.agent.process_group import (
    in_state,
    kill_group,
    log_tail,
    signal_group,
    spawn_group,
    terminate_group,
)
from dbtester.agent.sampler import Sampler, data_disk, dir_usage
from dbtester.databases.base import DatabaseKind, LaunchPlan, MemberSpec, Peer
from dbtester.errors import MemberError
from dbtester.install import Installed
from dbtester.util.net import interface_for, port_free
from dbtester.util.paths import write_private

__all__ = ["Member", "StopResult"]

#: how long a process must stay up before Start reports success
SETTLE_S = 0.5
FILE_NAMES = ("metrics.csv", "database.log", "agent.log")


@dataclass(frozen=True)
class StopResult:
    disk_usage_bytes: int
    killed: bool
    exit_code: int
    stop_seconds: float
    archived_to: str
    samples: int
    #: "" when the controller asked; else why the agent stopped it by itself
    stopped_by: str = ""


def _refuse_busy_ports(me: Peer) -> None:
    busy = [f"{name} {port}" for name, port in me.ports.items() if not port_free(me.host, port)]
    if busy:
        raise MemberError(
            f"{me.host}: port already in use: {', '.join(busy)} (another database, or a"
            " member of an earlier run still running?)"
        )


def _write_files(plan: LaunchPlan) -> None:
    for path, text in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, text)  # a member's TLS key is among them


def _log_to(log: logging.Logger, path: Path) -> logging.Handler:
    """A handler, added to ``log``, that appends its lines to ``path``."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    return handler


class Member:
    """A database member this agent started."""

    def __init__(
        self,
        kind: DatabaseKind,
        installed: Installed,
        spec: MemberSpec,
        *,
        sample_interval: float,
        failure_root: Path,
        layer: Installed | None = None,
    ) -> None:
        self.kind = kind
        self.installed = installed
        self.spec = spec
        self.sample_interval = sample_interval
        self.failure_root = failure_root
        self.dir = spec.member_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.sampler: Sampler | None = None
        self.state = "new"
        self.error = ""
        self.started_unix = 0.0
        self._lock = threading.Lock()
        self._log_handler: logging.Handler | None = None
        self._stopped: StopResult | None = None
        #: the server it needs beside it (kine's PostgreSQL), when its kind says so
        self.companion: CompanionProcess | None = None
        # Its own logger (under the agent's): its agent.log holds only its lines.
        self.log = logging.getLogger(
            f"dbtester.agent.member.{spec.member_dir.parent.name}.{spec.index}.{id(self)}"
        )
        self._isolation = MemberIsolation(
            f"{kind.name} member {spec.index}", f"{self.dir}", self.log
        )
        #: the slow-disk layer under its data dir, when the case asks for one
        self.layer = DiskLayer(layer, spec.data_dir, self.log) if layer is not None else None

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        _refuse_busy_ports(self.spec.me)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec.data_dir.mkdir(parents=True, exist_ok=True)
        self._log_handler = _log_to(self.log, self.dir / "agent.log")
        self.state = "starting"
        try:
            if self.layer is not None:
                self.layer.open()
            self._start_process()
        except BaseException:
            kill_group(self.process)  # never leave a half-started database behind
            if self.companion is not None:
                self.companion.stop(0.0)
            if self.state == "starting":
                self.state = "exited"
            if self.layer is not None:
                self.layer.close_quietly()
            _detach(self.log, self._log_handler)  # twice is harmless
            raise

    def _start_process(self) -> None:
        me = self.spec.me
        plan = self.kind.launch(self.installed, self.spec)
        _write_files(plan)
        disk = data_disk(self.layer.backing if self.layer else self.spec.data_dir)
        sampling: dict[str, Any] = {"interface": interface_for(me.host), "disk": disk}
        sampling["interval"] = self.sample_interval
        if plan.companion is not None and self.companion is None:  # not again at a restart
            self.companion = CompanionProcess(plan.companion, self.spec, self.log, sampling)
            self.companion.start()
        self._spawn(plan)
        self._settle()
        assert self.process is not None
        watched = _watch(self.process)
        if watched is None:  # it died just after the settle: told as at start
            self._settle()
        assert watched is not None  # _settle raised for a process that exited
        sizes = self.kind.size_probe(self.spec)
        self.sampler = Sampler(
            watched, self.dir / "metrics.csv", self.spec.data_dir, sizes=sizes, **sampling
        )
        self.sampler.start()
        self.state = "running"
        where = f"disk {self.sampler.disk or 'all'}, interface {self.sampler.interface or 'all'}"
        self.log.info("sampling pid %d every %.2fs (%s)", self.pid, self.sample_interval, where)

    def _spawn(self, plan: LaunchPlan) -> None:
        what = f"{self.kind.name} {self.installed.version} member {self.spec.index}"
        self.log.info("starting %s: %s", what, " ".join(plan.argv))
        self.process = spawn_group(plan.argv, plan.env, self.dir, self.dir / "database.log")
        self.started_unix = time.time()

    def _settle(self) -> None:
        assert self.process is not None
        try:
            code = self.process.wait(SETTLE_S)
        except subprocess.TimeoutExpired:
            return
        self.state = "exited"
        tail = log_tail(self.dir / "database.log")
        self.error = f"exited with code {code} at start; log tail:\n{tail}"
        raise MemberError(f"{self.kind.name} member {self.spec.index} {self.error}")

    # ------------------------------------------------------------------ status

    def poll(self) -> str:
        """'running', 'exited' (died by itself) or 'stopped' (we stopped it);
        during a fault (an upgrade holds the lock for seconds) the state as it
        stands, not waited for: the heartbeat must not find the agent silent."""
        if not self._lock.acquire(blocking=False):
            return self.state
        try:
            code = self.process.poll() if self.state == "running" and self.process else None
            if code is not None:
                self.state = "exited"
                tail = log_tail(self.dir / "database.log", 5)
                self.error = f"exited unexpectedly with code {code}; log tail:\n{tail}"
                self.log.error("%s member %d %s", self.kind.name, self.spec.index, self.error)
            return self.state
        finally:
            self._lock.release()

    # ------------------------------------------------------------------ faults

    def kill(self) -> None:
        """SIGKILL the running member's process group, as a scheduled fault: its
        data dir stays (for :meth:`restart`) and its state is "killed", which no
        one mistakes for a member that died by itself. The sampler goes on
        writing rows (pid 0) so the gap shows in the per-second series."""
        with self._lock:
            process = self._expect("kill", ("running", "paused"))
            signal_group(process, signal.SIGKILL)
            process.wait()
            self.state = "killed"
            self.log.info("killed (scheduled fault): SIGKILL to group %d", process.pid)

    def restart(self) -> None:
        """Start a killed member again on its data dir, with the same flags; a
        new sampler appends to the same metrics.csv."""
        with self._lock:
            self._expect("restart", ("killed",))
            if self.sampler is not None:
                self.sampler.stop(final_sample=False)
            self._relaunch()
            self.log.info("restarted (scheduled fault) as pid %d", self.pid)

    def upgrade(self, installed: Installed, grace: float) -> None:
        """A rolling upgrade's step: stopped as a stop does, started again on
        its data as ``installed``'s version (a new sampler appends)."""
        with self._lock:
            process = self._expect("upgrade", ("running",))
            if self.sampler is not None:
                self.sampler.stop(final_sample=True)
            terminate_group(process, grace, self.log)
            was, self.installed = self.installed.version, installed
            self._relaunch()
            said = f"upgraded from {was} to {installed.version} (scheduled event)"
            self.log.info("%s as pid %d", said, self.pid)

    def _relaunch(self) -> None:
        """Start it again on its data dir; on failure none is left, exited."""
        self.state = "starting"
        try:
            self._start_process()
        except BaseException:
            kill_group(self.process)
            self.state = "exited"
            raise

    def pause(self) -> None:
        """SIGSTOP the member's process group: it stops answering but keeps its
        sockets and memory, like a member stalled by its machine."""
        with self._lock:
            signal_group(self._expect("pause", ("running",)), signal.SIGSTOP)
            self.state = "paused"
            self.log.info("paused (scheduled fault): SIGSTOP to group %d", self.pid)

    def resume(self) -> None:
        with self._lock:
            signal_group(self._expect("resume", ("paused",)), signal.SIGCONT)
            self.state = "running"
            self.log.info("resumed (scheduled fault): SIGCONT to group %d", self.pid)

    def isolate(self, agent_port: int, *, keep_clients: bool = False) -> None:
        """Cut this member's host off the network (an nftables table; see
        agent/isolation.py), keeping the agent reachable on ``agent_port``, and
        with ``keep_clients`` the member's client port too: then only its peers
        are cut off, and it answers what it can alone (a serializable read).
        The process state stays as it is: an isolated member runs (the
        heartbeat must not count it dead, and a real death is still seen), it
        only hears nothing. Kill, restart, pause and resume work on it as on
        any other."""
        with self._lock:
            self._expect("isolate", ("running", "paused", "killed"))
            kept = (self.spec.me.ports["client"],) if keep_clients else ()
            self._isolation.isolate(self.spec.me.host, agent_port, kept)

    def heal(self) -> None:
        with self._lock:
            self._isolation.heal()

    def slow_disk(self, fsync_ms: float) -> None:
        """Every fsync in its data dir waits ``fsync_ms`` longer (0: none)."""
        with self._lock:
            self._expect("slow the disk of", ("running", "paused", "killed"))
            if self.layer is None:
                raise MemberError(NO_LAYER)
            self.layer.set_fsync_ms(fsync_ms)

    def on_companion(self, act: Callable[[CompanionProcess], None]) -> CompanionProcess:
        """``act`` (a fault) on the server it runs beside it, under its lock."""
        with self._lock:
            if self.companion is None:
                raise MemberError(f"member {self.spec.index} runs no server beside it")
            act(self.companion)
            return self.companion

    @property
    def isolated(self) -> bool:
        return self._isolation.active

    def _expect(self, action: str, states: tuple[str, ...]) -> subprocess.Popen[bytes]:
        """The member's process, when its state allows ``action``."""
        what = f"{self.kind.name} member {self.spec.index}"
        return in_state(self.process, self.state, states, action, what)

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    @property
    def exit_code(self) -> int:
        if self.process is None or self.process.returncode is None:
            return 0
        return self.process.returncode

    # ------------------------------------------------------------------ stop

    def stop(self, *, failed: bool, grace: float, by: str = "") -> StopResult:
        """SIGTERM the process group, wait ``grace`` seconds, then SIGKILL it;
        measure the data dir; remove it, or archive it when the run failed.
        ``by``: why the agent stops it of its own accord ("" for the controller's
        Stop); a later Stop gets the first stop's result, and with it this."""
        with self._lock:
            if self._stopped is not None:  # a second stop (watchdog, then controller)
                return self._stopped
            begin = time.monotonic()
            healed = self._isolation.heal_on_stop()  # called whatever the error
            self.error = self.error or healed
            if self.state == "running" and self.process is not None:
                code = self.process.poll()
                if code is not None:  # died since the last status call
                    self.state = "exited"
                    self.error = f"exited unexpectedly with code {code}"
            if self.sampler is not None:
                # A last row just before the signal; none of a process going away.
                self.sampler.stop(final_sample=self.state == "running")
            if self.state == "paused" and self.process is not None:
                signal_group(self.process, signal.SIGCONT)  # a stopped process ignores SIGTERM
            killed = terminate_group(self.process, grace, self.log)
            if self.companion is not None:  # after the member: it is the member's server
                self.companion.stop(grace)
            if self.layer is not None:  # after the member: it held files open in it
                problem = self.layer.close_quietly()
                self.error = self.error or problem
            keep = failed or self.state == "exited"  # a failure's data, for a post-mortem
            self.state = "stopped"
            usage, archived = _clear(self.failure_root, self.dir, self.spec.data_dir, keep=keep)
            seconds = time.monotonic() - begin
            self.log.info(
                "stopped in %.2fs (killed=%s, exit %s); data dir %d bytes%s",
                seconds,
                killed,
                self.exit_code,
                usage,
                f", archived to {archived}" if archived else "",
            )
            _detach(self.log, self._log_handler)  # twice is harmless
            samples = self.sampler.samples if self.sampler else 0
            self._stopped = StopResult(
                usage, killed, self.exit_code, seconds, archived, samples, stopped_by=by
            )
            return self._stopped

    def file_names(self) -> tuple[str, ...]:
        """The files of its folder a controller may fetch."""
        return FILE_NAMES + (self.companion.file_names if self.companion else ())

    def files(self) -> dict[str, int]:
        here = [n for n in self.file_names() if (self.dir / n).exists()]
        return {n: (self.dir / n).stat().st_size for n in here}


def _detach(log: logging.Logger, handler: logging.Handler | None) -> None:
    """``handler`` taken off ``log`` and closed (None: nothing to do)."""
    if handler is not None:
        log.removeHandler(handler)
        handler.close()


def _watch(process: subprocess.Popen[bytes]) -> psutil.Process | None:
    """The member's process for its sampler; None when it died since it settled."""
    try:
        return psutil.Process(process.pid)
    except psutil.NoSuchProcess:
        process.wait()
        return None


def _clear(failure_root: Path, member_dir: Path, data_dir: Path, *, keep: bool) -> tuple[int, str]:
    """The data dir's size, and where it was archived when ``keep`` (else
    it is removed: "")."""
    usage = dir_usage(data_dir)
    if keep:
        return usage, str(_archive(failure_root, member_dir, data_dir))
    shutil.rmtree(data_dir, ignore_errors=True)
    return usage, ""


def _archive(failure_root: Path, member_dir: Path, data_dir: Path) -> Path:
    """A failed member's data dir moved under ``failure_root``, kept for a
    post-mortem, at the same path below the runs folder."""
    target = failure_root / member_dir.relative_to(member_dir.parents[2])
    target.parent.mkdir(parents=True, exist_ok=True)
    if data_dir.exists():
        shutil.move(data_dir, target)
    return target
