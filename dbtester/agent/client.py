"""The controller's side of the agent protocol: a small typed client.

Every call carries the bearer token (when there is one) and a deadline; a
failure names the agent's address, so "which host?" never needs asking.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dbtester.databases.base import MemberTls, Peer
from dbtester.errors import AgentError
from dbtester.proto import agent_pb2 as pb
from dbtester.proto import agent_pb2_grpc as pb_grpc

__all__ = ["FAULT_ACTIONS", "AgentClient", "ClockOffset"]

#: a scheduled fault's action -> the agent RPC that carries it out
FAULT_ACTIONS = {
    "kill": "Kill",
    "restart": "Restart",
    "pause": "Pause",
    "resume": "Resume",
    "isolate": "Isolate",
    "heal": "Heal",
    "upgrade": "Upgrade",
    "slow_disk": "SlowDisk",
    "restore_disk": "RestoreDisk",
}


def _failed(address: str, error: grpc.RpcError) -> AgentError:
    """An AgentError for a failed call, carrying its gRPC status code."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    name = code.name if code else ""
    return AgentError(address, f"{name or 'ERROR'}: {details}", name)


@dataclass(frozen=True)
class ClockOffset:
    """The agent's clock minus ours, measured NTP style from one round trip."""

    offset_s: float
    round_trip_s: float


class AgentClient:
    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        tls_ca: bytes | None = None,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(tls_ca, tls_key, tls_cert)
            self.channel = grpc.secure_channel(address, creds)
        else:
            self.channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.AgentStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return getattr(self._stub, method)(
                request, timeout=timeout or self.timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise _failed(self.address, exc) from None

    # ------------------------------------------------------------------ calls

    def health(self, timeout: float = 5.0) -> str:
        """The health service's status name, e.g. 'SERVING'."""
        try:
            reply = self._health.Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=""), timeout=timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise _failed(self.address, exc) from None
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.health(timeout=2.0) == "SERVING":
                    return
            except AgentError as exc:
                if exc.status == "UNAUTHENTICATED" or time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AgentError(self.address, f"not serving after {timeout:.0f} s")
            time.sleep(0.2)

    def start(
        self,
        *,
        run_id: str,
        database_id: str,
        kind: str,
        version: str,
        member_index: int,
        peers: list[Peer],
        flags: Mapping[str, Any],
        sample_interval_s: float = 0.0,
        heartbeat_timeout_s: float = 0.0,
        cluster_token: str = "",
        slow_disk: bool = False,
        tls: MemberTls | None = None,
        auth: bool = False,
        timeout: float = 60.0,
    ) -> pb.StartResponse:
        request = pb.StartRequest(
            run_id=run_id,
            database_id=database_id,
            kind=kind,
            version=version,
            member_index=member_index,
            peers=[pb.Peer(name=p.name, host=p.host, ports=dict(p.ports)) for p in peers],
            flags_json=json.dumps(dict(flags)),
            sample_interval_s=sample_interval_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
            cluster_token=cluster_token,
            slow_disk=slow_disk,
            auth=auth,
        )
        if tls is not None:
            request.tls.CopyFrom(pb.MemberTls(ca_pem=tls.ca, cert_pem=tls.cert, key_pem=tls.key))
        return self._call("Start", request, timeout)  # type: ignore[no-any-return]

    def stop(
        self,
        run_id: str,
        database_id: str,
        member_index: int,
        *,
        failed: bool = False,
        grace_s: float = 0.0,
    ) -> pb.StopResponse:
        request = pb.StopRequest(
            run_id=run_id,
            database_id=database_id,
            member_index=member_index,
            failed=failed,
            grace_s=grace_s,
        )
        return self._call("Stop", request, timeout=max(60.0, grace_s + 30))  # type: ignore[no-any-return]

    def fault(
        self,
        action: str,
        run_id: str,
        database_id: str,
        member_index: int,
        *,
        keep_clients: bool = False,
        version: str = "",
        fsync_ms: float = 0.0,
        companion: bool = False,
    ) -> pb.FaultResponse:
        """A scheduled fault on one member: ``action`` is a key of FAULT_ACTIONS
        ("kill", "restart", "pause", "resume", "isolate", "heal", "upgrade",
        "slow_disk", "restore_disk"), carried by the agent's RPC of that name;
        an isolation with ``keep_clients`` cuts the member off its peers only;
        an upgrade restarts it as ``version``; a slow disk waits ``fsync_ms``
        longer at each fsync; with ``companion`` a kill, restart, pause or
        resume acts on the server the member runs beside it."""
        if action not in FAULT_ACTIONS:
            raise ValueError(f"unknown fault action {action!r}")
        request = pb.FaultRequest(
            run_id=run_id,
            database_id=database_id,
            member_index=member_index,
            keep_clients=keep_clients,
            version=version,
            fsync_ms=fsync_ms,
            companion=companion,
        )
        # A restart waits for the member to settle; a kill for it to be gone;
        # an upgrade for both, the stop within the agent's grace.
        timeout = 120.0 if action == "upgrade" else 60.0
        return self._call(FAULT_ACTIONS[action], request, timeout=timeout)  # type: ignore[no-any-return]

    def status(self, timeout: float | None = None) -> pb.StatusResponse:
        return self._call("Status", pb.StatusRequest(), timeout)  # type: ignore[no-any-return]

    def clock_offset(self) -> ClockOffset:
        """Offset of the agent's wall clock from ours: the agent's reading minus the
        midpoint of our send and receive times; accurate to half the round trip."""
        sent = time.time()
        reply = self.status()
        received = time.time()
        return ClockOffset(reply.wall_time_unix - (sent + received) / 2, received - sent)

    def load(self, run_id: str, database_id: str, plan_json: str, start_unix: float) -> Any:
        """The Load call's stream of replies (its ``cancel()`` stops the
        agent's engine); iterating raises grpc.RpcError, which
        :meth:`failed` turns into an AgentError naming this agent."""
        request = pb.LoadRequest(
            run_id=run_id, database_id=database_id, plan_json=plan_json, start_unix=start_unix
        )
        return self._stub.Load(request, metadata=self._metadata)

    def failed(self, error: grpc.RpcError) -> AgentError:
        """An AgentError naming this agent for a failed streaming call."""
        return _failed(self.address, error)

    def stop_load(self, run_id: str, database_id: str) -> bool:
        """Ask the agent's running load to stop early; False when none ran."""
        request = pb.StopLoadRequest(run_id=run_id, database_id=database_id)
        return bool(self._call("StopLoad", request, timeout=5.0).stopped)

    def list_files(self, run_id: str, database_id: str, member_index: int) -> dict[str, int]:
        request = pb.ListFilesRequest(
            run_id=run_id, database_id=database_id, member_index=member_index
        )
        reply = self._call("ListFiles", request)
        return {f.name: f.size for f in reply.files}

    def fetch(
        self, run_id: str, database_id: str, member_index: int, name: str, target: Path
    ) -> int:
        """Stream file ``name`` into ``target``; returns the bytes written."""
        request = pb.FetchFileRequest(
            run_id=run_id, database_id=database_id, member_index=member_index, name=name
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        written = 0
        try:
            with partial.open("wb") as out:
                for chunk in self._stub.FetchFile(
                    request, timeout=max(self.timeout, 300), metadata=self._metadata
                ):
                    out.write(chunk.data)
                    written += len(chunk.data)
        except grpc.RpcError as exc:
            partial.unlink(missing_ok=True)
            raise _failed(self.address, exc) from None
        partial.replace(target)
        return written
