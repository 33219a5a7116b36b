"""The agent's gRPC service: start, stop, status, files — plus its watchdog.

Requests name a kind and a version, never a path or a command: the agent
resolves them to binaries it has installed (``$DBTESTER_HOME``) or that its own
config allow-lists. With no call from the controller for the heartbeat timeout,
the agent stops its databases itself and keeps their files.
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from pydantic import ValidationError

from dbtester import __version__
from dbtester.agent.config import AgentConfig
from dbtester.agent.load import LoadRefused, LoadRunner
from dbtester.agent.member import FILE_NAMES, Member
from dbtester.config.model import HOST_PATTERN, VERSION_PATTERN
from dbtester.databases import KINDS, DatabaseKind
from dbtester.databases.base import MemberSpec, Peer
from dbtester.errors import MemberError
from dbtester.install import Installed, find_installed, list_installed
from dbtester.proto import agent_pb2 as pb
from dbtester.proto import agent_pb2_grpc as pb_grpc
from dbtester.util.host import host_facts
from dbtester.util.paths import SAFE_NAME

__all__ = ["AgentService"]

log = logging.getLogger(__name__)

CLUSTER_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,300}")
CHUNK = 64 * 1024
#: a kind's flags are a few keys; anything longer is not flags
MAX_FLAGS_JSON = 64 * 1024
#: bounds on the numbers a request sets (0 means "the agent's default")
SAMPLE_INTERVAL_S = (0.1, 60.0)
HEARTBEAT_TIMEOUT_S = (0.1, 86_400.0)
GRACE_S = (0.0, 600.0)
MemberKey = tuple[str, str, int]
BUSY = ("new", "starting", "running")


class AgentService(pb_grpc.AgentServicer):
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.members: dict[MemberKey, Member] = {}
        self._lock = threading.Lock()
        self._last_contact = time.monotonic()
        self._timeout = config.heartbeat_timeout_s
        #: the port the agent listens on (the server sets the bound one): the
        #: one an isolation keeps open, so the controller can still heal
        self.agent_port = _listen_port(config.listen)
        self._closing = threading.Event()
        host = host_facts()
        #: this machine, for every StartResponse: the controller records it
        #: per member so that runs on different hardware are not compared
        self.host = pb.Host(
            hostname=host.hostname,
            kernel=host.kernel,
            cpu_model=host.cpu_model,
            cores=host.cores or 0,
            memory_gib=host.memory_gib,
        )
        #: (kind, version, root) -> the installed files' digest, computed once:
        #: an etcd binary takes tens of milliseconds to hash
        self._digests: dict[tuple[str, str, str], str] = {}
        #: the load this agent runs as a load host (one at a time)
        self.loads = LoadRunner(config.data_root, host.cores or 0, config.load_targets)
        self._watchdog = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._watchdog.start()

    # ------------------------------------------------------------------ heartbeat

    def touch(self) -> None:
        self._last_contact = time.monotonic()

    def _watch(self) -> None:
        while not self._closing.wait(1.0):
            silent = time.monotonic() - self._last_contact
            if silent > self._timeout and self._running():
                # one wording for the log and for the controller that asks later
                why = (
                    f"the agent's watchdog, after no call from the controller for {silent:.0f} s"
                    f" (timeout {self._timeout:.0f} s)"
                )
                log.error("stopping every database and keeping its files: %s", why)
                self.stop_all(failed=True, by=why)

    def _running(self) -> list[Member]:
        """Every member not stopped yet: a killed, paused or isolated one too
        (its stop resumes it, archives its data, deletes its isolation)."""
        with self._lock:
            return [m for m in self.members.values() if m.poll() != "stopped"]

    def stop_all(self, *, failed: bool, by: str) -> None:
        for member in self._running():
            try:
                member.stop(failed=failed, grace=self.config.stop_grace_s, by=by)
            except Exception:
                log.exception("stopping member %d failed", member.spec.index)

    def close(self) -> None:
        """Agent shutdown (SIGTERM): stop every database, keep its files."""
        self._closing.set()
        self.stop_all(failed=True, by="the agent's own shutdown")

    # ------------------------------------------------------------------ start

    def Start(self, request: pb.StartRequest, context: grpc.ServicerContext) -> pb.StartResponse:
        if self._closing.is_set():
            context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down")
        kind = self._kind(request.kind, context)
        self._check_names(request, context)
        self._check_numbers(request, context)
        installed = self._binary(kind, request.version, context)
        flags = self._flags(kind, request.flags_json, context)
        peers = self._peers(kind, request, context)
        key = (request.run_id, request.database_id, request.member_index)
        member_dir = (
            self.config.data_root
            / "runs"
            / request.run_id
            / request.database_id
            / f"member-{request.member_index}"
        )
        spec = MemberSpec(
            index=request.member_index,
            peers=peers,
            flags=flags,
            member_dir=member_dir,
            data_dir=member_dir / "data",
            cluster_token=request.cluster_token or f"{request.run_id}-{request.database_id}",
        )
        interval = request.sample_interval_s or self.config.sample_interval_s
        with self._lock:
            if self._closing.is_set():  # checked again where it cannot race close()
                context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down")
            existing = self.members.get(key)
            if existing is not None and existing.poll() in BUSY:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"member {key} is already running")
            member = Member(
                kind,
                installed,
                spec,
                sample_interval=interval,
                failure_root=self.config.data_root / "failed",
            )
            self.members[key] = member
        if request.heartbeat_timeout_s > 0:
            self._timeout = request.heartbeat_timeout_s
        try:
            member.start()
        except MemberError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        if self._closing.is_set():  # close() began while it started: never orphan it
            member.stop(failed=True, grace=self.config.stop_grace_s)
            context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down")
        assert member.process is not None
        return pb.StartResponse(
            pid=member.process.pid,
            data_dir=str(spec.data_dir),
            started_unix=member.started_unix,
            host=self.host,
            binary_sha256=self._digest(installed),
        )

    def _digest(self, installed: Installed) -> str:
        key = (installed.kind, installed.version, str(installed.root))
        with self._lock:
            found = self._digests.get(key)
        if found is None:
            found = installed.sha256()
            with self._lock:
                self._digests[key] = found
        return found

    def _kind(self, name: str, context: grpc.ServicerContext) -> DatabaseKind:
        kind = KINDS.get(name)
        if kind is None:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown kind {_show(name)}; allowed: {', '.join(KINDS)}",
            )
        return kind

    def _check_names(self, request: pb.StartRequest, context: grpc.ServicerContext) -> None:
        for field in ("run_id", "database_id"):
            value = getattr(request, field)
            if not SAFE_NAME.fullmatch(value):
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{field} {_show(value)} must be letters, digits, . _ - (no paths)",
                )
        if not re.fullmatch(VERSION_PATTERN, request.version):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"version {_show(request.version)} is not a version (letters, digits, . _ + ~ -)",
            )
        token = request.cluster_token
        if token and not CLUSTER_TOKEN.fullmatch(token):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"cluster_token {_show(token)} must be 1-300 letters, digits, . _ -",
            )

    def _check_numbers(self, request: pb.StartRequest, context: grpc.ServicerContext) -> None:
        for field, (low, high) in (
            ("sample_interval_s", SAMPLE_INTERVAL_S),
            ("heartbeat_timeout_s", HEARTBEAT_TIMEOUT_S),
        ):
            problem = _out_of_range(field, getattr(request, field), low, high)
            if problem:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)

    def _binary(self, kind: DatabaseKind, version: str, context: grpc.ServicerContext) -> Installed:
        allowed = self.config.binaries.get(kind.name, {})
        if version in allowed:
            entry = allowed[version]
            return Installed(
                kind.name,
                version,
                Path(next(iter(entry.values()))).parent,
                "agent config allow-list",
                entry,
                "",
            )
        found = find_installed(kind.name, version)
        if found is not None:
            return found
        have = sorted({*allowed, *(i.version for i in list_installed() if i.kind == kind.name)})
        listed = ", ".join(have) if have else "none"
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{kind.name} {version} is not installed on {socket.gethostname()}; versions"
            f" this agent can run: {listed} (add one with: dbtester install"
            f" {kind.name}@{version})",
        )
        raise AssertionError  # abort raises

    def _flags(self, kind: DatabaseKind, text: str, context: grpc.ServicerContext):  # type: ignore[no-untyped-def]
        if len(text) > MAX_FLAGS_JSON:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"bad {kind.name} flags: {len(text):,} characters of JSON is not flags",
            )
        try:
            return kind.flags_model.model_validate(json.loads(text or "{}"))
        except RecursionError:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"bad {kind.name} flags: nested too deeply"
            )
        except (ValueError, ValidationError) as exc:
            reason = str(exc)[:500]
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad {kind.name} flags: {reason}")

    def _peers(
        self, kind: DatabaseKind, request: pb.StartRequest, context: grpc.ServicerContext
    ) -> tuple[Peer, ...]:
        peers = tuple(Peer(p.name, p.host, dict(p.ports)) for p in request.peers)
        problems = []
        if request.member_index >= len(peers):
            problems.append(f"member_index {request.member_index} but {len(peers)} peers")
        if len({p.name for p in peers}) != len(peers):
            problems.append("peer names must be unique")
        for peer in peers:
            # Hosts reach config files (zoo.cfg) and flags: an address, nothing else.
            if not re.fullmatch(HOST_PATTERN, peer.host) or len(peer.host) > 255:
                problems.append(
                    f"peer {_show(peer.name)} host {_show(peer.host)} is not an address"
                )
            bad = [p for p in peer.ports.values() if not 1 <= p <= 65535]
            if bad:
                problems.append(f"peer {_show(peer.name)} has ports out of range: {bad[:5]}")
            missing = set(kind.default_ports) - set(peer.ports)
            if missing:
                problems.append(f"peer {_show(peer.name)} lacks ports {sorted(missing)}")
            if not SAFE_NAME.fullmatch(peer.name):
                problems.append(f"peer name {_show(peer.name)} must be letters, digits, . _ -")
        if problems:
            more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "; ".join(problems[:5]) + more)
        return peers

    # ------------------------------------------------------------------ stop, status

    def _member(
        self, run_id: str, database_id: str, index: int, context: grpc.ServicerContext
    ) -> Member:
        with self._lock:
            member = self.members.get((run_id, database_id, index))
        if member is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no member {index} of {_show(database_id)} in run {_show(run_id)} on this agent",
            )
        return member

    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopResponse:
        problem = _out_of_range("grace_s", request.grace_s, *GRACE_S)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        member = self._member(request.run_id, request.database_id, request.member_index, context)
        result = member.stop(
            failed=request.failed, grace=request.grace_s or self.config.stop_grace_s
        )
        return pb.StopResponse(
            disk_usage_bytes=result.disk_usage_bytes,
            killed=result.killed,
            exit_code=result.exit_code,
            stop_seconds=result.stop_seconds,
            archived_to=result.archived_to,
            samples=result.samples,
            stopped_by=result.stopped_by,
        )

    # ------------------------------------------------------------------ faults

    def Kill(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.kill)

    def Restart(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.restart)

    def Pause(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.pause)

    def Resume(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.resume)

    def Isolate(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(
            request,
            context,
            lambda member: member.isolate(self.agent_port, keep_clients=request.keep_clients),
        )

    def Heal(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.heal)

    def _fault(
        self,
        request: pb.FaultRequest,
        context: grpc.ServicerContext,
        action: Callable[[Member], None],
    ) -> pb.FaultResponse:
        """One fault on one member: FAILED_PRECONDITION when its state does not
        allow it (kill a killed member, resume a running one...)."""
        member = self._member(request.run_id, request.database_id, request.member_index, context)
        # The moment it is applied, not when applying it returned: a kill waits
        # for the process to be gone, a restart for it to start, while clients
        # already see the effect.
        at = time.time()
        try:
            action(member)
        except MemberError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, _show(str(exc), 2000))
        return pb.FaultResponse(
            at_unix=at, pid=member.pid, state=member.state, isolated=member.isolated
        )

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusResponse:
        with self._lock:
            members = list(self.members.items())
        statuses = []
        for (run_id, database_id, index), member in members:
            state = member.poll()
            statuses.append(
                pb.MemberStatus(
                    run_id=run_id,
                    database_id=database_id,
                    member_index=index,
                    state=state,
                    pid=member.pid,
                    exit_code=member.exit_code,
                    sampling=bool(member.sampler and member.sampler.running),
                    samples=member.sampler.samples if member.sampler else 0,
                    error=member.error,
                    isolated=member.isolated,
                )
            )
        return pb.StatusResponse(
            agent_version=__version__,
            wall_time_unix=time.time() + self.loads.shift_s,
            members=statuses,
            hostname=socket.gethostname(),
        )

    # ------------------------------------------------------------------ load

    def Load(
        self, request: pb.LoadRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.LoadReply]:
        if self._closing.is_set():
            context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down")
        replies = self.loads.run(
            request, lambda: context.is_active() and not self._closing.is_set()
        )
        try:
            yield from replies
        except LoadRefused as exc:
            context.abort(getattr(grpc.StatusCode, exc.status), _show(str(exc), 2000))

    def StopLoad(
        self, request: pb.StopLoadRequest, context: grpc.ServicerContext
    ) -> pb.StopLoadResponse:
        return pb.StopLoadResponse(stopped=self.loads.stop())

    # ------------------------------------------------------------------ files

    def ListFiles(
        self, request: pb.ListFilesRequest, context: grpc.ServicerContext
    ) -> pb.ListFilesResponse:
        member = self._member(request.run_id, request.database_id, request.member_index, context)
        return pb.ListFilesResponse(
            files=[pb.FileInfo(name=n, size=s) for n, s in member.files().items()]
        )

    def FetchFile(
        self, request: pb.FetchFileRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.FileChunk]:
        member = self._member(request.run_id, request.database_id, request.member_index, context)
        if request.name not in FILE_NAMES:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown file {_show(request.name)}; allowed: {', '.join(FILE_NAMES)}",
            )
        path = member.dir / request.name
        if not path.exists():
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} does not exist (yet)")
        offset = 0
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                yield pb.FileChunk(data=chunk, offset=offset)
                offset += len(chunk)


def _show(value: str, limit: int = 80) -> str:
    """A name from a request, quoted and cut short, for an error message."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def _listen_port(listen: str) -> int:
    """The port of ``host:port`` (0 when it has none the agent can tell)."""
    port = listen.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else 0


def _out_of_range(field: str, value: float, low: float, high: float) -> str | None:
    """Why ``value`` (0: the agent's default) is not a number of seconds in [low, high]."""
    if value == 0 or (math.isfinite(value) and low <= value <= high):
        return None
    return f"{field} {value!r} must be 0 (the default) or from {low:g} to {high:g} seconds"
