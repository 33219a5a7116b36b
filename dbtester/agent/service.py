"""The agent's gRPC service: start, stop, status, files — plus its watchdog.

Requests name a kind and a version, never a path or a command: the agent
resolves them to binaries it has installed (``$DBTESTER_HOME``) or that its own
config allow-lists (agent/start.py checks and resolves a Start request before
anything runs). With no call from the controller for the heartbeat timeout,
the agent stops its databases itself and keeps their files.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from dbtester import __version__
from dbtester.agent.companion import CompanionProcess
from dbtester.agent.config import AgentConfig
from dbtester.agent.load import LoadRefused, LoadRunner
from dbtester.agent.member import Member
from dbtester.agent.start import (
    StartRefusedError,
    installed_version,
    out_of_range,
    plan_start,
    show,
)
from dbtester.errors import MemberError
from dbtester.install import Installed
from dbtester.proto import agent_pb2 as pb
from dbtester.proto import agent_pb2_grpc as pb_grpc
from dbtester.util.host import host_facts

__all__ = ["AgentService"]

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
#: bounds on a Stop's grace period (0 means "the agent's default")
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
        # A folder of this process's own: agents on one machine may share a
        # data root, and one's load would delete the other's files.
        self.loads = LoadRunner(
            config.data_root, host.cores or 0, config.load_targets, f"load-{os.getpid()}"
        )
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
        try:
            plan = plan_start(request, self.config)
        except StartRefusedError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        key = (request.run_id, request.database_id, request.member_index)
        with self._lock:
            if self._closing.is_set():  # checked again where it cannot race close()
                context.abort(grpc.StatusCode.UNAVAILABLE, "the agent is shutting down")
            existing = self.members.get(key)
            if existing is not None and existing.poll() in BUSY:
                context.abort(grpc.StatusCode.ALREADY_EXISTS, f"member {key} is already running")
            member = Member(
                plan.kind,
                plan.installed,
                plan.spec,
                sample_interval=plan.sample_interval,
                failure_root=self.config.data_root / "failed",
                layer=plan.layer,
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
            data_dir=str(plan.spec.data_dir),
            started_unix=member.started_unix,
            host=self.host,
            binary_sha256=self._digest(plan.installed),
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

    # ------------------------------------------------------------------ stop, status

    def _member(
        self, run_id: str, database_id: str, index: int, context: grpc.ServicerContext
    ) -> Member:
        with self._lock:
            member = self.members.get((run_id, database_id, index))
        if member is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no member {index} of {show(database_id)} in run {show(run_id)} on this agent",
            )
        return member

    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopResponse:
        problem = out_of_range("grace_s", request.grace_s, *GRACE_S)
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
        return self._fault(request, context, Member.kill, CompanionProcess.kill)

    def Restart(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.restart, CompanionProcess.restart)

    def Pause(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.pause, CompanionProcess.pause)

    def Resume(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.resume, CompanionProcess.resume)

    def Isolate(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(
            request,
            context,
            lambda member: member.isolate(self.agent_port, keep_clients=request.keep_clients),
        )

    def Heal(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, Member.heal)

    def Upgrade(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        member = self._member(request.run_id, request.database_id, request.member_index, context)
        try:
            installed = installed_version(member.kind, request.version, self.config)
        except StartRefusedError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, show(str(exc), 2000))
        grace = self.config.stop_grace_s
        return self._fault(request, context, lambda m: m.upgrade(installed, grace))

    def SlowDisk(self, request: pb.FaultRequest, context: grpc.ServicerContext) -> pb.FaultResponse:
        return self._fault(request, context, lambda member: member.slow_disk(request.fsync_ms))

    def RestoreDisk(
        self, request: pb.FaultRequest, context: grpc.ServicerContext
    ) -> pb.FaultResponse:
        return self._fault(request, context, lambda member: member.slow_disk(0.0))

    def _fault(
        self,
        request: pb.FaultRequest,
        context: grpc.ServicerContext,
        action: Callable[[Member], None],
        on_companion: Callable[[CompanionProcess], None] | None = None,
    ) -> pb.FaultResponse:
        """One fault on one member, or with ``companion`` on the server it runs
        beside it: FAILED_PRECONDITION when its state does not allow it (kill
        a killed member, resume a running one...)."""
        member = self._member(request.run_id, request.database_id, request.member_index, context)
        if request.companion and on_companion is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "this fault has no companion form")
        # The moment it is applied, not when applying it returned: a kill waits
        # for the process to be gone, a restart for it to start, while clients
        # already see the effect.
        at = time.time()
        try:
            if request.companion and on_companion is not None:
                server = member.on_companion(on_companion)
                return pb.FaultResponse(at_unix=at, pid=server.pid, state=server.state)
            action(member)
        except MemberError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, show(str(exc), 2000))
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
            context.abort(getattr(grpc.StatusCode, exc.status), show(str(exc), 2000))

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
        allowed = member.file_names()
        if request.name not in allowed:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown file {show(request.name)}; allowed: {', '.join(allowed)}",
            )
        path = member.dir / request.name
        if not path.exists():
            context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} does not exist (yet)")
        offset = 0
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                yield pb.FileChunk(data=chunk, offset=offset)
                offset += len(chunk)


def _listen_port(listen: str) -> int:
    """The port of ``host:port`` (0 when it has none the agent can tell)."""
    port = listen.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else 0
